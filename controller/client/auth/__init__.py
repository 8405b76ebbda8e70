"""Credentials from a kubeconfig: the loaders, exec credential plugins, OIDC id-tokens,
and when each must be fetched again. Part of the client: it may import the rest of
controller/client/ and below.
"""
