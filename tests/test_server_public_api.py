"""The server's public API (``typed_decisions.server.__all__``) is pinned: it is what the
integrations may use (Ray Serve runs ``create_app`` as its ingress; tests/test_layout.py checks they
use nothing else). ``create_app(collectors=)`` shows an outside collector's metrics on ``/metrics``.
Fast tier: a fake decider, no model."""

from __future__ import annotations

from td_optional import require

require("fastapi", "pip install 'typed-decisions-runtime[server]'")

from fastapi.testclient import TestClient  # noqa: E402
from prometheus_client.core import CounterMetricFamily  # noqa: E402

import td_fakes  # noqa: E402
import typed_decisions.server as server  # noqa: E402


def test_all_is_pinned():
    assert server.__all__ == ["ApiKey", "Job", "ServerSettings", "answer_each", "answer_jobs", "check_exposure",
                              "create_app", "error_response", "load_api_keys", "main", "serve_parser",
                              "settings_from_args"]
    for name in server.__all__:
        assert getattr(server, name) is not None


class _Replicas:
    def describe(self):
        return []

    def collect(self):
        family = CounterMetricFamily("typed_decisions_replica_calls", "calls per replica", labels=["replica"])
        family.add_metric(["r1"], 3.0)
        yield family


def test_collectors_show_on_metrics_beside_the_apps_own():
    app = server.create_app(td_fakes.FakeDecider("fake-model"), collectors=[_Replicas()])
    with TestClient(app) as c:
        text = c.get("/metrics").text
    assert 'typed_decisions_replica_calls_total{replica="r1"} 3.0' in text
    assert "typed_decisions_http_requests_total" in text  # the app's own, in the same registry
    with TestClient(server.create_app(td_fakes.FakeDecider("fake-model"))) as c:
        assert "typed_decisions_replica_calls" not in c.get("/metrics").text  # one registry per app


def test_answer_each_isolates_a_failing_item():
    assert server.answer_each(lambda xs: [10 // x for x in xs], [5, 0, 2])[::2] == [2, 5]
    assert isinstance(server.answer_each(lambda xs: [10 // x for x in xs], [5, 0, 2])[1], ZeroDivisionError)


class _AnswersJobs(td_fakes.FakeDecider):
    """A decider that answers Jobs itself (as Ray Serve's ``RemoteDecider`` does, on its replicas):
    here with ``server.answer_jobs`` on the fake, recording what it was handed."""

    def __init__(self) -> None:
        super().__init__("fake-model")
        self.jobs: list[server.Job] = []

    def answer_jobs(self, jobs):
        self.jobs += jobs
        return server.answer_jobs(td_fakes.FakeDecider("fake-model"), jobs)


def test_a_decider_that_answers_jobs_gets_the_batches_as_jobs():
    """The micro-batcher hands such a decider its batches whole (``Service.run_jobs``), each
    ``/v1/decisions`` job marked ``set_aside``, and never calls its ``run_many``."""
    decider = _AnswersJobs()
    decider.run_many = None  # type: ignore[assignment]  # the app must not call it once loaded
    question = {"type": "predicate", "instructions": "Urgent?"}
    with TestClient(server.create_app(decider)) as c:
        r = c.post("/v1/decisions", json={"model": "fake-model", "input": "x", "questions": [question]})
        assert r.status_code == 200 and r.json()["answers"][0]["type"] == "predicate", r.text
        r = c.post("/v1/systemone", json={"model": "fake-model", "state": "x", "questions": {
            "q": {"type": "noul", "instructions": "Urgent?"}}})
        assert r.status_code == 200, r.text
    assert [j.set_aside for j in decider.jobs] == [False, True, False]  # the self-test, then the two requests
