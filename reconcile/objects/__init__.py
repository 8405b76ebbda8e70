"""The objects built from a job, as pure functions: a replica's pod, its headless
service, TF_CONFIG; and the view of an observed pod a pass reads (observed). Imports
api/.
"""
