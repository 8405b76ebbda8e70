"""``tfjob-controller release-finalizers``: let go of every pod the controller tracks,
for an uninstall or a controller that will stay down.

Every pod the controller creates carries its tracking finalizer (reconcile.policy.tracking),
which only the controller removes, once the pod's end is recorded. With the controller
gone for good, a deleted pod would stay Terminating and its namespace could never be
deleted. This command removes that one finalizer, and nothing else, from every pod that
carries it (in one namespace, or all): one strategic-merge patch per pod that deletes
the finalizer from the list, with the pod's UID as a precondition, so another
controller's finalizers stay and a same-named successor is never touched. Pods are
found by the finalizer, not by labels: a pod whose labels were edited is still found,
and a foreign pod carrying our operator label but not our finalizer is left alone.

Run it with the controller stopped (scaled to zero or deleted): a running controller
would go on tracking the pods it creates. ``--stop-deployment NAMESPACE/NAME`` stops it
first: the Deployment scaled to zero, then every pod its selector matches waited out
(a pod still terminating could still be creating); the Helm chart's pre-delete hook
runs it so. Exit codes: 0 when every tracked pod was released (or was gone already), 1
when a release failed or the controller did not stop, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

from controller import errors
from controller.client.api import ClientSettings, KubeApi
from controller.client.kube import PODS, ResourceClient
from controller.types import JSON
from reconcile.api.names import TRACKING_FINALIZER
from reconcile.objects.observed import observe_all, raws
from reconcile.policy.tracking import PATCH_TYPE, release_patch, tracked
from tfjob_controller.app import add_cluster_flags

PROG = "tfjob-controller release-finalizers"
#: Releases in flight at once.
CONCURRENCY = 8
#: a controller pod has 45 s to end (the Deployment's terminationGracePeriodSeconds)
STOP_TIMEOUT = 120.0


def parse_args(argv: Sequence[str], prog: str = PROG) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=prog,
        description=f"Remove the finalizer {TRACKING_FINALIZER} (and only it) from every pod"
        " that carries it, so pods and namespaces can be deleted once the controller is"
        " gone. Run it with the controller stopped.",
    )
    add_cluster_flags(p)
    p.add_argument(
        "--namespace", "-n", default=None, help="only this namespace (default: every one)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="list the pods that would be released, only"
    )
    p.add_argument(
        "--stop-deployment",
        default=None,
        metavar="NAMESPACE/NAME",
        help="scale the controller's Deployment to zero and wait for its pods to be gone"
        " first (a Deployment that does not exist is stopped already)",
    )
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=STOP_TIMEOUT,
        help="seconds to wait for the Deployment's pods to go (default %(default)s)",
    )
    args = p.parse_args(list(argv))
    if args.stop_deployment is not None:
        ns, _, name = args.stop_deployment.partition("/")
        if not ns or not name or "/" in name:
            p.error("--stop-deployment takes NAMESPACE/NAME")
    return args


async def stop_deployment(
    api: KubeApi, pods: ResourceClient, namespace: str, name: str, wait_seconds: float
) -> bool:
    """Scale the Deployment to zero; True once no pod of it is left (or there is no such
    Deployment)."""
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
    try:
        deployment = await api.request("GET", path)
        await api.request(
            "PATCH",
            f"{path}/scale",
            body={"spec": {"replicas": 0}},
            content_type="application/merge-patch+json",
        )
    except errors.NotFound:
        print(f"deployment {namespace}/{name} not found: nothing to stop")
        return True
    labels = (deployment.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
    if not labels:
        print(f"deployment {namespace}/{name} has no matchLabels selector", file=sys.stderr)
        return False
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    print(f"scaled deployment {namespace}/{name} to 0; waiting for its pods to go")
    with anyio.move_on_after(wait_seconds):
        while True:
            left = (await pods.list(namespace, label_selector=selector)).items
            if not left:
                print(f"deployment {namespace}/{name} stopped")
                return True
            await anyio.sleep(1.0)
    print(
        f"deployment {namespace}/{name}: pods still there after {wait_seconds:g} s", file=sys.stderr
    )
    return False


async def release_all(pods: ResourceClient, namespace: str | None, dry_run: bool) -> int:
    listed = await pods.list(namespace)
    todo = raws(tracked(observe_all(listed.items)))
    failed = 0
    done = 0
    limiter = anyio.Semaphore(CONCURRENCY)

    async def release(pod: JSON) -> None:
        nonlocal failed, done
        meta = pod["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        if dry_run:
            print(f"would release {where}")
            return
        async with limiter:
            try:
                await pods.patch(
                    meta["namespace"],
                    meta["name"],
                    release_patch(TRACKING_FINALIZER, meta["uid"]),
                    content_type=PATCH_TYPE,
                )
            except (errors.NotFound, errors.Conflict, errors.Invalid):
                # gone, or a same-named successor (the UID precondition): nothing of ours
                print(f"gone already: {where}")
                return
            except (errors.ApiError, OSError) as e:
                failed += 1
                print(f"FAILED {where}: {e}", file=sys.stderr)
                return
        done += 1
        print(f"released {where}")

    async with anyio.create_task_group() as tg:
        for pod in todo:
            tg.start_soon(release, pod)
    scope = f"namespace {namespace}" if namespace else "all namespaces"
    verb = "would be released" if dry_run else "released"
    count = len(todo) if dry_run else done
    print(f"{count} of {len(todo)} tracked pods {verb} ({scope}); {failed} failed")
    return 1 if failed else 0


async def run(args: argparse.Namespace) -> int:
    # the controller's own default rate: an uninstall need not be fast
    settings = ClientSettings(qps=20, burst=30, user_agent="tfjob-controller-release-finalizers")
    api = await KubeApi.from_kubeconfig(args.kubeconfig, args.context, settings)
    async with api:
        pods = ResourceClient(api, PODS)
        if args.stop_deployment and not args.dry_run:
            ns, _, name = args.stop_deployment.partition("/")
            if not await stop_deployment(api, pods, ns, name, args.stop_timeout):
                return 1
        return await release_all(pods, args.namespace, args.dry_run)


def main(argv: Sequence[str], prog: str = PROG) -> int:
    args = parse_args(argv, prog)
    try:
        return anyio.run(run, args)
    except (errors.ApiError, OSError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
