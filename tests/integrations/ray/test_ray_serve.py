"""The Ray Serve application on a real local Ray cluster with the tiny real model.

- typesafe-sdk 0.7.5 against the Serve endpoint: the answers equal ``Decider.run`` in this process
  (within 1e-5), and the server's own errors (422 with the field path, 404, 401) come through.
- State affinity: 2 Decider replicas, 4 states × 5 requests, sent one at a time. Which replica
  served each request, and whether it hit its prefix cache, is read from the ingress's
  ``/metrics`` (each replica's counters, labelled by replica) before and after the request. With
  Ray's ConsistentHashRouter every state stays on one replica (its first request misses, the
  other four find the state's prefix in the cache);
  with Serve's default router the states spread over both replicas and miss more.
- ``/v1/decisions`` on both batching paths: a question the compiler refuses is refused alone, the
  Decision equal to the local server's (the replicas answer the server's Jobs with ``answer_jobs``).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from td_optional import require

pytestmark = pytest.mark.model

require("ray", "bash scripts/setup.sh (installs integrations/ray[test])")

from ray import serve  # noqa: E402
from ray_typed_decisions import build_app  # noqa: E402

APP = "td"
KEY = "sk-test"
QUESTIONS = [  # five different questions: each request computes its own suffix after the state
    {"urgent": {"type": "noul", "instructions": "Is it urgent?"}},
    {"refund": {"type": "noul", "instructions": "Does the customer ask for money back?"}},
    {"team": {"type": "choice", "criteria": {"billing": "Payments", "tech": "Bugs, outages"}}},
    {"angry": {"type": "noul", "instructions": "Is the customer angry?"}},
    {"severity": {"type": "score", "criteria": ["low", "medium", "high"]}},
]


class Apps:
    """Deploys the Serve app with the options asked for, afresh (its replicas start with empty
    caches and a new hash ring), and only when they change: a deployment takes ~10 s, and at most
    2 Decider replicas exist at a time (the cluster has 2 CPUs). Preset files only add routes, so
    a deployment keeps serving the ones it was given and a test asking for fewer reuses it.
    Redeploying in place is no cheaper: Serve gives each ``serve.run`` a new version and rolls
    every replica."""

    DEFAULTS: dict[str, Any] = {"num_replicas": 2, "affinity": True, "batching": "micro"}

    def __init__(self, model_dir: Any, url: str):
        self.model_dir, self.url = model_dir, url
        self.current: dict[str, Any] | None = None
        self.presets: tuple[str, ...] = ()

    def ensure(self, presets: tuple[str, ...] = (), **options: Any) -> str:
        """``presets``: preset files the ingress serves (``settings.presets``)."""
        wanted = {**self.DEFAULTS, **options}
        if wanted != self.current or not set(presets) <= set(self.presets):
            with contextlib.suppress(Exception):
                serve.delete(APP)
            kept = self.presets if self.current is not None else ()
            self.presets = tuple(dict.fromkeys((*kept, *presets)))
            settings = {"api_keys": {KEY: "tests"}, "presets": list(self.presets)}
            serve.run(build_app(self.model_dir, settings=settings, **wanted), name=APP, route_prefix="/")
            self.current = wanted
        return self.url


@pytest.fixture(scope="module")
def apps(tiny_model_dir, serve_url) -> Iterator[Apps]:
    apps = Apps(tiny_model_dir, serve_url)
    yield apps
    with contextlib.suppress(Exception):
        serve.delete(APP)


@pytest.fixture(scope="module", params=["micro", "serve"])
def batching(request: pytest.FixtureRequest) -> str:
    """The two batching paths. Module-scoped, so pytest runs every test of one path before the
    other's: one deployment each."""
    return request.param


# --------------------------------------------------------------------------- the SDK round trip


def _probabilities(answers: dict[str, Any]) -> dict[str, Any]:
    return {n: a.get("probabilities", {"yes": a.get("noul")}) for n, a in answers.items()}


def test_typesafe_sdk_round_trip_equals_decider_run(apps, tiny_decider):
    sdk = require("typesafe_sdk", "pip install 'typed-decisions-runtime[test]'")
    url = apps.ensure(num_replicas=2)
    state = "I was charged twice for my subscription this month and want the duplicate refunded. " * 12
    questions = {"team": sdk.Choice(instructions="Which team should handle this?",
                                    criteria={"billing": "Payments, refunds", "tech": "Bugs, outages"}),
                 "urgent": sdk.Noul(instructions="Is it urgent?"),
                 "severity": sdk.Score(instructions="How severe is it?", criteria=["low", "medium", "high"])}
    wire = {k: q.model_dump(mode="json", exclude_none=True) for k, q in questions.items()}
    want = tiny_decider.run({"model": tiny_decider.name, "state": state, "questions": wire}
                            ).model_dump(mode="json")["answers"]
    no_retry = sdk.RetryPolicy(max_retries=0)
    for compression in ("zstd", False):  # the state is > 1 KiB: zstd bodies through Serve's proxy
        with sdk.TypeSafeClient(api_key=KEY, base_url=url, compression=compression, retry=no_retry,
                                timeout=60) as client:
            result = client.system_one(state, questions)
            got = result.model_dump(mode="json")["answers"]
            assert result.request_id.startswith("req_") and result.model == tiny_decider.name
            assert set(got) == set(want)
            for name, probs in _probabilities(want).items():
                assert _probabilities(got)[name] == pytest.approx(probs, abs=1e-5), (compression, name)
            assert got["team"]["choice"] == want["team"]["choice"]
            assert got["severity"]["score"] == pytest.approx(want["severity"]["score"], abs=1e-5)
            assert [m.name for m in client.models.list().models] == [tiny_decider.name, "jev-latest", "tiny"]
            with pytest.raises(sdk.TypeSafeUnprocessableEntityError) as e:
                client.system_one(state, {"bad": {"type": "score", "criteria": ["only one"]}})
            assert "questions.bad.criteria" in str(e.value)
            with pytest.raises(sdk.TypeSafeNotFoundError):
                client.system_one(state, questions, model="no-such-model")
    with (sdk.TypeSafeClient(api_key="sk-wrong", base_url=url, retry=no_retry) as client,
          pytest.raises(sdk.TypeSafeAuthenticationError)):
        client.system_one(state, questions)


def test_explain_and_operations_routes_through_serve(apps, tiny_decider):
    url = apps.ensure(num_replicas=2)
    request = {"model": tiny_decider.name, "state": "The app crashes at login.", "questions": QUESTIONS[2]}
    auth = {"authorization": f"Bearer {KEY}"}
    body = httpx.post(url + "/v1/explain", json=request, headers=auth, timeout=60).json()
    want = tiny_decider.explain(request)
    assert body["prefix_ids"] == want.prefix_ids
    assert body["answers"]["team"]["probabilities"] == pytest.approx(
        want.answers["team"].probabilities, abs=1e-5)
    assert httpx.get(url + "/readyz").json()["model"] == tiny_decider.name
    assert httpx.get(url + "/healthz").json() == {"status": "ok"}


# --------------------------------------------------------------------------- state affinity


def _replica_counters(url: str) -> dict[str, dict[str, float]]:
    """{replica: {"calls", "prefix_cache_tokens_reused", ...}} from the ingress's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[str, float]] = {}
    metrics = httpx.get(url + "/metrics", headers={"authorization": f"Bearer {KEY}"})  # keyed counters need a key
    for family in text_string_to_metric_families(metrics.text):
        name = family.name.removeprefix("typed_decisions_replica_")
        if family.name.startswith("typed_decisions_replica_"):
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out.setdefault(sample.labels["replica"], {})[name] = sample.value
    return out


def _prefix_tokens(decider: Any, state: str) -> int:
    """Prompt tokens before the question: chat template head + the state (the cached prefix)."""
    from typed_decisions.decider import parse_request

    request = parse_request({"model": decider.name, "state": state, "questions": QUESTIONS[0]})
    return len(decider.compiler.compile(request).prefix_ids)


def _ask(url: str, state: str, questions: dict[str, Any]) -> dict[str, Any]:
    """One request; which replica computed it and how many prompt tokens its prefix cache gave
    back (counter deltas). The cache's hit counter also counts a hit on the template head alone,
    so a request *found its state* when the tokens reused cover the whole prefix."""
    before = _replica_counters(url)
    t0 = time.perf_counter()
    r = httpx.post(url + "/v1/systemone", json={"model": "jev-latest", "state": state, "questions": questions},
                   headers={"authorization": f"Bearer {KEY}"}, timeout=60)
    seconds = time.perf_counter() - t0
    assert r.status_code == 200, r.text
    after = _replica_counters(url)
    delta = {rep: {k: v - before.get(rep, {}).get(k, 0.0) for k, v in c.items()} for rep, c in after.items()}
    (replica,) = [rep for rep, d in delta.items() if d["calls"] > 0]  # exactly one replica computed it
    return {"replica": replica, "reused": delta[replica]["prefix_cache_tokens_reused"], "seconds": seconds}


def _state(i: int) -> str:
    return (f"Ticket {i}: customer {i * 7919 % 1000} writes that order #{1000 + i} arrived late and "
            f"the invoice shows a different amount than the checkout page. ") * 4


def _wait_for_both_replicas(url: str) -> None:
    """Until the ingress's router knows both replicas (throwaway states, a few requests)."""
    seen: set[str] = set()
    for i in range(40):
        seen.add(_ask(url, f"warm-up {i}", QUESTIONS[0])["replica"])
        if len(seen) == 2:
            return
    raise AssertionError(f"only {seen} answered 40 requests")


def _workload(url: str, states: list[str]) -> list[dict[str, Any]]:
    """Round robin: every state's question k, then every state's question k+1, ... (5 rounds)."""
    return [{"state": s, **_ask(url, s, QUESTIONS[k])} for k in range(len(QUESTIONS)) for s in states]


def _pick_states(url: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Four states, two owned by each replica (a state's owner is a pure function of its key, so
    the first request of each candidate shows it); their first requests are round 0."""
    chosen: list[str] = []
    first: list[dict[str, Any]] = []
    per_replica: dict[str, int] = {}
    for i in range(40):
        state = _state(i)
        asked = _ask(url, state, QUESTIONS[0])
        if per_replica.get(asked["replica"], 0) < 2:
            per_replica[asked["replica"]] = per_replica.get(asked["replica"], 0) + 1
            chosen.append(state)
            first.append({"state": state, **asked})
        if len(chosen) == 4:
            return chosen, first
    raise AssertionError(f"40 states did not give two per replica: {per_replica}")


def _summary(records: list[dict[str, Any]], decider: Any) -> dict[str, Any]:
    """Per state the replicas it met; state hits (the whole prefix came from the cache); latency."""
    hits = sum(r["reused"] >= _prefix_tokens(decider, r["state"]) for r in records)
    misses = len(records) - hits
    return {"replicas_per_state": {s[:12]: len({r["replica"] for r in records if r["state"] == s})
                                   for s in dict.fromkeys(r["state"] for r in records)},
            "replicas": len({r["replica"] for r in records}), "hits": hits, "misses": misses,
            "hit_rate": hits / (hits + misses), "mean_ms": 1000 * statistics.mean(r["seconds"] for r in records)}


def test_affinity_keeps_each_state_on_one_replica_and_default_router_does_not(apps, tiny_decider,
                                                                               record_property):
    url = apps.ensure(num_replicas=2, affinity=True)
    _wait_for_both_replicas(url)
    states, first = _pick_states(url)
    records = first + [{"state": s, **_ask(url, s, q)} for q in QUESTIONS[1:] for s in states]
    affinity = _summary(records, tiny_decider)
    assert len(records) == 20
    assert set(affinity["replicas_per_state"].values()) == {1}, affinity  # each state: one replica
    assert affinity["replicas"] == 2, affinity                              # both replicas used
    assert affinity["misses"] == 4 and affinity["hits"] == 16, affinity    # one miss per state: its first

    url = apps.ensure(num_replicas=2, affinity=False)
    _wait_for_both_replicas(url)
    default = _summary(_workload(url, states), tiny_decider)
    # Serve's default router picks between 2 replicas at random when both are idle: every state
    # staying on one replica has probability (2 / 2**5) ** 4 ≈ 1.5e-5.
    assert max(default["replicas_per_state"].values()) == 2, default
    assert default["misses"] > affinity["misses"], (affinity, default)
    record_property("affinity", affinity)
    record_property("default_router", default)
    print(f"\naffinity: {affinity}\ndefault router: {default}")


# --------------------------------------------------------------------------- batching


def _batch_counters(url: str) -> tuple[float, float]:
    """(Decider.run_many calls, requests in them), summed over the replicas, from /metrics."""
    counters = _replica_counters(url)
    return (sum(c.get("run_many_calls", 0.0) for c in counters.values()),
            sum(c.get("run_many_requests", 0.0) for c in counters.values()))


def _post_together(client: httpx.Client, url: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """POST every body at once (a barrier releases the threads together, so a batch can form);
    the replies in the bodies' order."""
    barrier = threading.Barrier(len(bodies))

    def post(body: dict[str, Any]) -> httpx.Response:
        barrier.wait()
        return client.post(url, json=body)

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, bodies))


def test_both_batching_paths_batch_and_equal_decider_run(apps, tiny_decider, batching):
    """16 concurrent requests about one state (one replica owns it), 4 different questions: every
    answer equals ``Decider.run`` within 1e-5, every request is counted once in a ``run_many``, and
    fewer calls than requests ran (a batch of more than one formed): in the ingress's micro-batcher
    (``micro``) or in the replica's ``@serve.batch`` (``serve``)."""
    url = apps.ensure(num_replicas=2, affinity=True, batching=batching)
    state = _state(77)
    bodies = [{"model": tiny_decider.name, "state": state, "questions": QUESTIONS[i % 4]} for i in range(16)]
    want = [tiny_decider.run(b).model_dump(mode="json")["answers"] for b in bodies]
    calls0, requests0 = _batch_counters(url)
    with httpx.Client(headers={"authorization": f"Bearer {KEY}"}, timeout=60) as client:
        replies = _post_together(client, url + "/v1/systemone", bodies)
    calls1, requests1 = _batch_counters(url)
    for r, w in zip(replies, want):
        assert r.status_code == 200, r.text
        got = r.json()["answers"]
        for name, probs in _probabilities(w).items():
            assert _probabilities(got)[name] == pytest.approx(probs, abs=1e-5), (batching, name)
    assert requests1 - requests0 == len(bodies)
    assert calls1 - calls0 < len(bodies), f"{batching}: no batch of more than one request formed"


# --------------------------------------------------------------------------- /v1/decisions refusals

# A label the tokenizer cannot place after the prompt ("\n\nx" merges with the newline that ends
# the assistant header; tests/test_server_decisions.py): the compiler refuses that question alone.
REFUSED = {"type": "choice", "name": "broken", "instructions": "Which?",
           "choices": [{"value": "\n\nx"}, {"value": "y"}]}
ASKED = [{"type": "predicate", "name": "refund", "instructions": "Does the customer ask for money back?"}, REFUSED,
         {"type": "choice", "name": "team", "instructions": "Which team?",
          "choices": [{"value": "billing"}, {"value": "tech", "description": "bugs, outages"}]}]


def test_a_refused_question_is_refused_alone_as_by_the_local_server(apps, tiny_decider, tiny_server, batching):
    """/v1/decisions through Serve with one question the compiler refuses between two it answers:
    that question is a refusal and the others are answered, on both batching paths, the Decision
    equal to the one the local server (``typed-decisions serve`` on the same export) sends back:
    answers (probabilities within 1e-5) and ``input_tokens`` (the answered questions' prompts).
    Asked again, the state's replica finds it in its prefix cache (``cached_tokens``, read there)."""
    url = apps.ensure(num_replicas=2, affinity=True, batching=batching)
    state = f"I was charged twice ({batching}); please refund one payment. " * 3
    body = {"model": tiny_decider.name, "input": state, "questions": ASKED}
    auth = {"authorization": f"Bearer {KEY}"}
    local = httpx.post(tiny_server + "/v1/decisions", json=body, headers={"authorization": "Bearer sk-test"},
                       timeout=60)
    served = httpx.post(url + "/v1/decisions", json=body, headers=auth, timeout=60)
    assert local.status_code == 200, local.text
    assert served.status_code == 200, (batching, served.text)
    want, got = local.json(), served.json()
    kinds = [a["type"] for a in got["answers"]]
    assert kinds == [a["type"] for a in want["answers"]] == ["predicate", "refusal", "choice"]
    assert got["answers"][1] == want["answers"][1] == {"type": "refusal", "name": "broken"}
    assert got["answers"][0]["probability"] == pytest.approx(want["answers"][0]["probability"], abs=1e-5)
    team, local_team = got["answers"][2], want["answers"][2]
    assert team["choice"] == local_team["choice"]
    assert [p["value"] for p in team["probabilities"]] == ["billing", "tech"]
    assert [p["probability"] for p in team["probabilities"]] == pytest.approx(
        [p["probability"] for p in local_team["probabilities"]], abs=1e-5)
    assert got["usage"]["input_tokens"] == want["usage"]["input_tokens"] > 0
    again = httpx.post(url + "/v1/decisions", json=body, headers=auth, timeout=60).json()
    assert again["answers"][1] == {"type": "refusal", "name": "broken"}
    state_tokens = len(tiny_decider.tokenizer.encode_plain(state))
    assert again["usage"]["input_tokens_details"]["cached_tokens"] >= 2 * state_tokens  # two answered prompts
    only = httpx.post(url + "/v1/decisions", json={**body, "questions": [REFUSED]}, headers=auth, timeout=60)
    assert only.status_code == 200, only.text
    assert only.json()["answers"] == [{"type": "refusal", "name": "broken"}]
    assert only.json()["usage"]["input_tokens"] == 0


# --------------------------------------------------------------------------- fitted presets

TEAM = {"name": "team", "version": 1, "question": {
    "name": "team", "type": "choice", "instructions": "Which team should handle this ticket?",
    "options": [{"name": "billing", "description": "payments, refunds"}, {"name": "tech", "description": "bugs, crashes"}]}}
ROWS = [{"state": t, "answer": "billing"} for t in ("I was charged twice", "refund my last payment",
                                                   "my invoice is wrong", "my card was declined")] + \
       [{"state": t, "answer": "tech"} for t in ("the app crashes on start", "login page is broken",
                                                "error 500 when saving", "sync stopped working")]


@pytest.fixture(scope="module")
def fitted_preset(tiny_decider, tmp_path_factory) -> tuple[Any, Any]:
    """A preset file with a head fitted on the tiny model, and a second one whose only head is
    for another model (a preset measured with a head this deployment does not have)."""
    pytest.importorskip("sklearn", reason="the [fit] extra: pip install 'typed-decisions-runtime[fit]'")
    from typed_decisions.presets import load_preset, with_head

    question = {"type": "choice", "instructions": TEAM["question"]["instructions"],
                "criteria": {o["name"]: o["description"] for o in TEAM["question"]["options"]}}
    head = tiny_decider.fit(question, ROWS, components=4)
    folder = tmp_path_factory.mktemp("presets")
    path, other = folder / "team.json", folder / "other.json"
    path.write_text(json.dumps(with_head(TEAM, head)))
    other.write_text(json.dumps(TEAM | {"name": "other", "fitted": {
        "another-model": head.model_copy(update={"model": "another-model"}).model_dump(mode="json")}}))
    return load_preset(path), (str(path), str(other))


def test_a_fitted_preset_answers_through_serve_as_in_python(apps, tiny_decider, fitted_preset, batching):
    """The replicas receive a preset's fitted head on both batching paths: the answer equals
    ``answer_preset`` in this process (the head's probabilities, its calibration note), concurrent
    fitted and zero-shot requests in one batch keep their own readouts, and a preset fitted for
    another model only is refused with 422 at params.fitted (zero-shot on request)."""
    from typed_decisions.presets import answer_preset

    preset, files = fitted_preset
    url = apps.ensure(files, num_replicas=2, affinity=True, batching=batching)
    state = "my card got charged two times for one order"
    want = answer_preset(tiny_decider, preset, state)
    zero = answer_preset(tiny_decider, preset, state, {"fitted": "none"})
    assert "fitted head" in want["calibration"]
    assert want["answers"]["team"]["probabilities"] != pytest.approx(zero["answers"]["team"]["probabilities"], abs=1e-4)
    bodies = [({"state": state} if i % 2 == 0 else {"state": state, "params": {"fitted": "none"}}) for i in range(8)]
    with httpx.Client(headers={"authorization": f"Bearer {KEY}"}, timeout=60) as client:
        replies = _post_together(client, url + "/v1/presets/team", bodies)
        for i, r in enumerate(replies):
            assert r.status_code == 200, r.text
            expected = want if i % 2 == 0 else zero
            got = r.json()
            assert got["calibration"] == expected["calibration"]
            assert got["answers"]["team"]["probabilities"] == pytest.approx(
                expected["answers"]["team"]["probabilities"], abs=1e-5), (batching, i)
        r = client.post(url + "/v1/presets/other", json={"state": state})
        assert r.status_code == 422 and "params.fitted" in r.text, r.text
        r = client.post(url + "/v1/presets/other", json={"state": state, "params": {"fitted": "none"}})
        assert r.status_code == 200, r.text


# --------------------------------------------------------------------------- a replica lost


def test_a_request_to_a_killed_replica_is_answered_by_the_other(apps, tiny_decider):
    """Kill (``ray.kill``) the replica that owns a state while a request about it is on its way:
    ``RemoteDecider`` re-sends it, another replica answers it, the answer equals ``Decider.run``."""
    import ray

    url = apps.ensure(num_replicas=2, affinity=True)
    _wait_for_both_replicas(url)
    state = _state(1000)
    owner = _ask(url, state, QUESTIONS[0])["replica"]
    request = {"model": tiny_decider.name, "state": state, "questions": QUESTIONS[2]}
    answer: dict[str, Any] = {}
    sent = threading.Thread(target=lambda: answer.update(r=httpx.post(
        url + "/v1/systemone", json=request, headers={"authorization": f"Bearer {KEY}"}, timeout=60)))
    before = _replica_counters(url)
    sent.start()
    ray.kill(ray.get_actor(f"SERVE_REPLICA::{APP}#Decider#{owner}", namespace="serve"), no_restart=True)
    sent.join(60)
    apps.current = None  # Serve replaces the replica (a new ring): the next test redeploys
    assert answer["r"].status_code == 200, answer["r"].text
    got = answer["r"].json()["answers"]["team"]
    want = tiny_decider.run(request).answers["team"]
    assert got["choice"] == want.choice
    assert got["probabilities"] == pytest.approx(want.probabilities, abs=1e-5)
    after = _replica_counters(url)
    others = [r for r in after if r != owner and after[r]["calls"] > before.get(r, {}).get("calls", 0)]
    assert others, (owner, before, after)  # another replica computed it
