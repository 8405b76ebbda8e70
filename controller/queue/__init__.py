"""The work queue (client-go's contract: fair, stingy, delayed adds) and the rate
limiters that space a key's retries. Imports the client (its token bucket) and below.
"""
