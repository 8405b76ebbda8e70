"""--leader-election-identity names the replica in the Lease and in every request's
User-Agent, which still starts with tfjob-controller (the benchmark counts by prefix)."""

from controller.client.api import ClientSettings
from controller.runtime.leader import default_identity
from tfjob_controller.app import LEASE_CLIENT_SETTINGS, client_settings, parse_args, with_identity


def test_the_flag_names_the_replica_and_without_it_each_process_has_its_own() -> None:
    assert client_settings(parse_args(["--leader-election-identity", "r1"]))[0] == "r1"
    # two replicas on one host (a laptop, a node running two) never share an identity
    first, second = (client_settings(parse_args([]))[0] for _ in range(2))
    assert first != second
    assert first.rpartition("_")[0] == default_identity().rpartition("_")[0]


def test_every_request_names_the_identity_after_the_agent() -> None:
    identity, settings = client_settings(
        parse_args(
            ["--leader-election-identity", "r1", "--kube-api-qps", "7", "--kube-api-tick", "0"]
        )
    )
    assert settings.user_agent == "tfjob-controller/r1"
    assert (settings.qps, settings.tick) == (7.0, 0.0)
    lease = with_identity(LEASE_CLIENT_SETTINGS, identity)
    assert lease.user_agent == "tfjob-controller-leader-election/r1"
    assert with_identity(ClientSettings(), "r1").user_agent == "tfjob-controller/r1"
