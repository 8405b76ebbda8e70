"""The cache: informers that list and watch one resource each and keep an indexed store
in sync (relisting when the watch expires), with transforms applied to each object
before it is stored. Imports the client and below.
"""
