"""--leader-election-identity names the replica in the Lease and in every request's
User-Agent, which still starts with tfjob-controller (the benchmark counts by prefix)."""

from controller.api import ClientSettings
from tfjob_controller.app import LEASE_CLIENT_SETTINGS, parse_args, with_identity


def test_identity_flag_defaults_to_none_and_is_parsed() -> None:
    assert parse_args([]).leader_election_identity is None
    assert parse_args(["--leader-election-identity", "r1"]).leader_election_identity == "r1"


def test_user_agents_carry_the_identity() -> None:
    assert with_identity(ClientSettings(), "r1").user_agent == "tfjob-controller/r1"
    lease = with_identity(LEASE_CLIENT_SETTINGS, "r1")
    assert lease.user_agent == "tfjob-controller-leader-election/r1"
    assert lease.qps == LEASE_CLIENT_SETTINGS.qps
