"""The objects built from a job, as pure functions: a replica's pod (and the facts
read off observed pods), its headless service, TF_CONFIG. Imports api/.
"""
