"""The behaviours of the API, one module each, as pure functions over a job and its
observed children: restart policies and backoff, successPolicy and failure, cleanup
and TTL, gang scheduling, whole-gang restart, outcome tracking, create failures, the
child diffs, conditions and status. Imports api/ and objects/.
"""
