"""What runs the reconcilers: the Controller (workers over a queue, the result
contract), the Manager (process lifecycle, signals, informers first, leadership),
leader election on a Lease, expectations, background writes, the event recorder and
the pacer. The top of controller/: it may import every other part.
"""
