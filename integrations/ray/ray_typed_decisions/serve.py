"""Ray Serve: the project's own HTTP app in front of N replicas that each hold one ``Decider``.

Two deployments, one application::

    HTTP ─▶ Serve proxy ─▶ Ingress (the server's FastAPI app: auth, bodies, 422s, request ids,
                           micro-batcher, /metrics)  ── DeploymentHandle
                                .options(session_id=sha256(state)) ──▶ Decider × N (one model each)

The ingress is ``typed_decisions.server.create_app`` unchanged; what it calls its "decider" is a
``RemoteDecider``: the micro-batcher hands it a batch, it splits the batch by state (the key of the
prefix cache is the state's prompt prefix, and the state alone decides it), sends each group to the
Decider deployment with the group's routing key, and puts the answers back in order. With
``affinity=True`` the Decider deployment routes with Ray's own
``ray.serve.experimental.consistent_hash_router.ConsistentHashRouter``: a key always lands on the
same replica (while the replica set is unchanged), so a state asked about again finds its prefix in
that replica's cache. Without it Serve's default power-of-two-choices router spreads requests by
queue length and a state's requests land on whichever replica is idle.

``batching="serve"`` moves batching from the ingress to the replicas: the ingress routes each
request alone (``create_app(dispatch=RemoteDecider.submit)``) and Ray's ``@serve.batch`` on
``DeciderReplica.decide`` gathers what reaches a replica into one ``run_many``. The default stays
``"micro"``: it was faster on every measured trial (``benchmarks/studies/ray_serve_batching.py``, docs/ray.md).
Either way the ingress hands the server's queued ``Job``s on and the replica answers them with the
server's own ``answer_jobs``, beside its model: a ``/v1/decisions`` question the compiler refuses
is a refusal there too (the others answered), and ``cached_tokens`` is the replica's prefix cache's.

Each Decider replica reserves ``num_cpus_per_replica`` Ray CPUs and runs ONNX Runtime with exactly
that many intra-op threads (Ray sets OMP_NUM_THREADS, which ONNX Runtime ignores). Its engine call
runs in a worker thread, so the replica's event loop stays free. Every reply carries the replica's
engine counters; the ingress's ``/metrics`` shows them per replica
(``typed_decisions_replica_prefix_cache_hits_total{replica=...}``, misses, tokens reused from
the cache, tokens computed / logical, engine calls) and summed in the server's usual ``typed_decisions_prefix_cache_hits_total``.

>>> from ray import serve                                                # doctest: +SKIP
>>> serve.run(build_app("~/.cache/typed-decisions/exports/tiny", num_replicas=2))  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.config import AutoscalingConfig, RequestRouterConfig
from ray.serve.deployment import Application
from ray.serve.handle import DeploymentHandle

from typed_decisions.compiler import LabelMode
from typed_decisions.presets import DeciderSettings
from typed_decisions.schema import DecisionRequest, DecisionResponse, json_sha256
from typed_decisions.server import Job, ServerSettings, create_app

from .replica import DeciderReplica, Heads, Reply
from .replica_metrics import ClusterEngine, ReplicaMetrics

CONSISTENT_HASH_ROUTER = "ray.serve.experimental.consistent_hash_router.ConsistentHashRouter"
# A replica that died mid-request (killed, OOM, node lost): its requests are pure reads, so they
# are sent again, to the replica that owns the key now; this many times, then the error stands.
REPLICA_RETRIES = 2
Batching = Literal["micro", "serve"]


def routing_key(request: DecisionRequest) -> str:
    """The session id a request is routed by: sha256 of its state's canonical JSON.

    The prefix cache is keyed by the prompt's shared prefix (chat template + state; the questions
    come after it), so requests with equal states share it whatever they ask.

    >>> q = {"u": {"type": "noul", "instructions": "Urgent?"}}
    >>> a = DecisionRequest.model_validate({"model": "m", "state": {"x": 1, "y": 2}, "questions": q})
    >>> b = DecisionRequest.model_validate({"model": "m", "state": {"y": 2, "x": 1}, "questions": q})
    >>> routing_key(a) == routing_key(b), len(routing_key(a))
    (True, 64)
    """
    return json_sha256(request.state)


# --------------------------------------------------------------------------- the ingress side


def _unwrap(error: RayTaskError) -> BaseException:
    """The replica's own exception (an ``InvalidRequestError`` keeps its 422 and field path)."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


class RemoteDecider:
    """What the server's ``Service`` holds as its decider: the Decider deployment behind a handle.

    ``answer_jobs`` (the micro-batcher's batch) is called on the server's engine thread (never on
    the event loop), so it may wait on ``DeploymentResponse.result()``; the groups of one batch run
    on their replicas concurrently. ``submit`` is the ``dispatch`` of ``batching="serve"``.
    ``run_many`` / ``explain`` make it a Decider for other callers (``answer_preset``).
    """

    def __init__(self, handle: DeploymentHandle, info: dict[str, Any], *, affinity: bool):
        self.handle = handle
        self.name: str = info["name"]
        # what a preset answer depends on is the replicas' Decider's, not this stand-in's
        # (``DeciderSettings.of`` reads it): their label mode, calibration file, quantization
        self.preset_settings: DeciderSettings = info["settings"]
        self.affinity = affinity
        self.engine = ClusterEngine()

    def _call(self, method: str, key: str, *args: Any) -> Any:
        handle = self.handle.options(session_id=key) if self.affinity else self.handle
        return getattr(handle, method).remote(*args)

    def _result(self, response: Any, method: str, key: str, *args: Any) -> list[Any]:
        for attempt in range(REPLICA_RETRIES + 1):
            try:
                reply: Reply = response.result()
                break
            except RayTaskError as e:
                raise _unwrap(e) from None
            except RayActorError:  # ActorDiedError, ActorUnavailableError: the replica is gone
                if attempt == REPLICA_RETRIES:
                    raise
                response = self._call(method, key, *args)
        self.engine.record(reply)
        return reply.results

    def answer_jobs(self, jobs: Sequence[Job]) -> list[Any]:
        """The server's ``answer_jobs`` on the replicas: the batch split by state, each group sent
        to its state's replica, answered there beside the model (a ``/v1/decisions`` job's
        refused questions set aside, its prefix-cache share read); answers in job order."""
        groups: dict[str, list[int]] = {}
        for i, job in enumerate(jobs):
            groups.setdefault(routing_key(job.request), []).append(i)
        args = {key: [jobs[i] for i in idx] for key, idx in groups.items()}
        calls = {key: self._call("run_jobs", key, args[key]) for key in groups}
        out: list[Any] = [None] * len(jobs)
        for key, idx in groups.items():
            for i, result in zip(idx, self._result(calls[key], "run_jobs", key, args[key])):
                out[i] = result
        return out

    def run_many(self, requests: Sequence[DecisionRequest], *, label_mode: LabelMode | None = None,
                 heads: Sequence[Heads] | None = None) -> list[DecisionResponse]:
        """``Decider.run_many`` on the replicas: the batch split by state, each group (with its
        requests' fitted heads, if any) sent to its state's replica; answers in request order."""
        per_request = list(heads) if heads is not None else [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(routing_key(r), []).append(i)
        args = {key: ([requests[i] for i in idx], label_mode, [per_request[i] for i in idx])
                for key, idx in groups.items()}
        calls = {key: self._call("run_many", key, *args[key]) for key in groups}
        out: list[Any] = [None] * len(requests)
        for key, idx in groups.items():
            results = self._result(calls[key], "run_many", key, *args[key])
            for i, response in zip(idx, results):
                out[i] = response
        return out

    def explain(self, request: DecisionRequest, *, label_mode: LabelMode | None = None) -> Any:
        key = routing_key(request)
        return self._result(self._call("explain", key, request, label_mode), "explain", key,
                            request, label_mode)[0]

    async def submit(self, job: Job) -> Any:
        """``batching="serve"``: one job straight to its replica's ``decide`` (``@serve.batch``
        batches there), awaited on the event loop; the server's ``Unbatched`` calls this."""
        key = routing_key(job.request)
        for attempt in range(REPLICA_RETRIES + 1):
            try:
                reply: Reply = await self._call("decide", key, job)
                break
            except RayTaskError as e:
                raise _unwrap(e) from None
            except RayActorError:  # the replica is gone: again, to the key's replica now
                if attempt == REPLICA_RETRIES:
                    raise
        self.engine.record(reply)
        (result,) = reply.results
        if isinstance(result, BaseException):  # this request's own error (its batch-mates' are fine)
            raise result
        return result


class IngressReplica:
    """Holds the Decider handle; ``__serve_build_asgi_app__`` builds the server's app around it."""

    def __init__(self, decider: DeploymentHandle, settings: dict[str, Any], affinity: bool,
                 batching: Batching = "micro"):
        self._handle = decider
        self._settings = ServerSettings.model_validate(settings)
        self._affinity = affinity
        self._batching = batching

    async def __serve_build_asgi_app__(self) -> Any:
        info = await self._handle.info.remote()
        remote = RemoteDecider(self._handle, info, affinity=self._affinity)
        return create_app(remote, settings=self._settings, collectors=[ReplicaMetrics(remote.engine)],
                          dispatch=remote.submit if self._batching == "serve" else None)


# --------------------------------------------------------------------------- configuration


class RayServeOptions(BaseModel):
    """Everything ``build_app`` needs: one model, validated (``serve run`` arguments land here)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="export directory or catalogue name, readable on every node "
                                   "that runs a Decider replica")
    num_replicas: int | None = Field(None, ge=1, description="fixed replica count (default 1)")
    autoscaling_config: dict[str, Any] | None = Field(
        None, description="Serve's AutoscalingConfig (min_replicas, max_replicas, "
                          "target_ongoing_requests, ...); excludes num_replicas")
    num_cpus_per_replica: float = Field(1.0, ge=1.0, description=(
        "Ray CPUs each Decider replica reserves; ONNX Runtime uses floor(this) intra-op threads"))
    affinity: bool = Field(True, description="route by state with Ray's ConsistentHashRouter")
    batching: Batching = Field("micro", description=(
        "'micro': the server's micro-batcher in the ingress (batches split by state before "
        "routing); 'serve': Ray Serve's @serve.batch in each Decider replica (every request routed "
        "alone, batched where it lands); both with settings.max_batch / settings.max_wait_ms"))
    num_fallback_replicas: int = Field(1, ge=0, description=(
        "replicas tried after a state's own one when it is full (0: strict affinity)"))
    max_ongoing_requests: int | None = Field(None, ge=1, description=(
        "per Decider replica (default: settings.max_batch, one batch's groups)"))
    ingress_num_cpus: float = Field(0.0, ge=0.0, description="Ray CPUs the ingress reserves")
    label_mode: LabelMode = "auto"
    max_tokens: int | None = Field(None, ge=1, description="refuse longer prompts (422)")
    cache_bytes: int = Field(512 << 20, ge=0, description="prefix-cache budget per replica")
    settings: ServerSettings = Field(default_factory=ServerSettings, description=(
        "the HTTP server's settings (API keys, batch size, queue, body limit)"))

    @model_validator(mode="after")
    def _one_scaling(self) -> RayServeOptions:
        if self.num_replicas is not None and self.autoscaling_config is not None:
            raise ValueError("give num_replicas or autoscaling_config, not both")
        if self.autoscaling_config is not None:
            AutoscalingConfig.model_validate(self.autoscaling_config)  # Serve's own checks, now
        return self

    @property
    def threads(self) -> int:
        return max(1, math.floor(self.num_cpus_per_replica))


def build_app(model: str | os.PathLike[str], **options: Any) -> Application:
    """The Serve application: the ingress (the project's HTTP app) over the Decider deployment.

    ``options`` are ``RayServeOptions`` fields (``num_replicas`` or ``autoscaling_config``,
    ``num_cpus_per_replica``, ``affinity``, ``settings``, ...). Run it with
    ``serve.run(build_app(...), route_prefix="/")``.
    """
    opts = RayServeOptions(model=os.fspath(model), **options)
    settings = opts.settings
    scaling: dict[str, Any] = ({"autoscaling_config": opts.autoscaling_config}
                               if opts.autoscaling_config is not None
                               else {"num_replicas": opts.num_replicas or 1})
    router = (RequestRouterConfig(request_router_class=CONSISTENT_HASH_ROUTER,
                                  request_router_kwargs={"num_fallback_replicas": opts.num_fallback_replicas})
              if opts.affinity else RequestRouterConfig())
    decider_kwargs = {"label_mode": opts.label_mode, "max_tokens": opts.max_tokens,
                      "cache_bytes": opts.cache_bytes}
    decider = serve.deployment(DeciderReplica).options(
        name="Decider", ray_actor_options={"num_cpus": opts.num_cpus_per_replica},
        max_ongoing_requests=opts.max_ongoing_requests or settings.max_batch,
        request_router_config=router, **scaling,
    ).bind(resolve_model(opts.model), opts.threads, decider_kwargs, settings.max_batch,
           settings.max_wait_ms / 1000)
    ingress = serve.deployment(serve.ingress()(IngressReplica)).options(
        name="Ingress", ray_actor_options={"num_cpus": opts.ingress_num_cpus},
        max_ongoing_requests=settings.queue_size + settings.max_batch,
    )
    return ingress.bind(decider, settings.model_dump(mode="json"), opts.affinity, opts.batching)


def resolve_model(model: str) -> str:
    """A directory as an absolute path (replicas may start in another working directory); a
    catalogue name as given (each replica finds it in its own cache)."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def app_builder(args: dict[str, Any]) -> Application:
    """For ``serve run ray_typed_decisions.serve:app_builder model=DIR num_replicas=2`` and Serve
    config files (``import_path: ray_typed_decisions.serve:app_builder`` with ``args:``)."""
    opts = RayServeOptions.model_validate(args)
    return build_app(opts.model, **opts.model_dump(exclude={"model"}))


__all__ = ["CONSISTENT_HASH_ROUTER", "RayServeOptions", "RemoteDecider", "app_builder", "build_app", "resolve_model",
           "routing_key"]
