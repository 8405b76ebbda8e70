"""CustomResourceDefinitions: the project's own (config/crd), installed before KCM
starts, and ones that come and go at run time (the Volcano PodGroup fixture)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hack.cluster.api import Api
from hack.cluster.host import REPO, log, wait_for

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

#: Volcano's PodGroup, a hand-written fixture; installed only when asked for.
VOLCANO_CRD_FILE = REPO / "hack" / "crds" / "volcano-podgroups.yaml"
VOLCANO_CRD = "podgroups.scheduling.volcano.sh"
VOLCANO_GROUP_VERSION = "scheduling.volcano.sh/v1beta1"


def crd_files() -> list[Path]:
    root = REPO / "config" / "crd"
    return sorted(p for p in root.rglob("*.yaml") if p.is_file()) if root.exists() else []


def _established(api: Api, name: str) -> bool:
    status, body = api.request("GET", f"{CRD_PATH}/{name}")
    conds = ((body or {}).get("status") or {}).get("conditions") or [] if status == 200 else []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conds)


def install_crds(api: Api, extra: Iterable[Path] = ()) -> list[str]:
    """Apply every CRD under config/crd plus `extra`; return once all are Established."""
    import yaml

    names = []
    for f in [*crd_files(), *extra]:
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                api.apply(doc, CRD_PATH)
                names.append(doc["metadata"]["name"])
    wait_for("CRDs established", lambda: all(_established(api, n) for n in names), 60)
    if names:
        log(f"CRDs installed: {', '.join(names)}")
    return names


def install_volcano_crd(api: Api, timeout: float = 60) -> None:
    """Install the Volcano PodGroup CRD; return once it is Established and its group
    version is served (what a client's discovery sees)."""
    import yaml

    api.apply(yaml.safe_load(VOLCANO_CRD_FILE.read_text()), CRD_PATH)

    def served() -> bool:
        return (
            _established(api, VOLCANO_CRD)
            and api.request("GET", f"/apis/{VOLCANO_GROUP_VERSION}")[0] == 200
        )

    wait_for(f"{VOLCANO_CRD} established and served", served, timeout)


def remove_volcano_crd(api: Api, timeout: float = 60) -> None:
    """Delete the Volcano PodGroup CRD (and so every Volcano PodGroup); return once
    neither the CRD nor its group version is served any more. A no-op when absent."""
    api.request("DELETE", f"{CRD_PATH}/{VOLCANO_CRD}")

    def gone() -> bool:
        return (
            api.request("GET", f"{CRD_PATH}/{VOLCANO_CRD}")[0] == 404
            and api.request("GET", f"/apis/{VOLCANO_GROUP_VERSION}")[0] == 404
        )

    wait_for(f"{VOLCANO_CRD} removed", gone, timeout)
