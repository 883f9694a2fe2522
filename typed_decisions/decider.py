"""The Decider: requests in, typed answers out. The thin shell that joins the pipeline stages.

    request ─ compiler ─▶ prefix + suffixes + label tries ─ engine ─▶ logits per trie node
            ─ readout ─▶ option probabilities ─ calibration (if a file is given) ─ reducers ─▶ answers

All questions of all requests passed together go to the engine in ONE call, so the state prefix is
prefilled once, question suffixes run as one batch, and multi-token label branches as another.

Why over 400 lines: the public surface (``decide``, ``run_many``, ``readouts``, ``explain``, ``fit``,
``features``, the heads' checks) stays on one class, the object every integration holds; the work
each method calls lives in its own module (readout_plan.py, explain.py, fit.py, fitted.py).

>>> decider = Decider.load("tiny")     # a catalogue name, or an export directory  # doctest: +SKIP
>>> decider.decide("I was charged twice.", {"team": Choice(criteria={"billing": None, "tech": None})})  # doctest: +SKIP
DecisionResponse(model='tiny', answers={'team': ChoiceAnswer(choice='billing', ...)}, usage=...)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from . import debias as debiasing
from . import reducers
from .artifacts import Artifacts, load_artifacts
from .calibration import CalibrationFile, calibrate
from .compiler import CompiledRequest, Compiler, LabelMode, resolve_label_mode
from .debias import MAX_ROTATIONS, Debias, rotation_shifts
from .engine import Engine
from .errors import InvalidRequestError
from .explain import Explanation, QuestionExplanation, TokenAccount, explain_head, explain_question
from .exports import locate
from .fit import check_rows_per_class, fit_head
from .fitted import FitReport, FittedHead
from .readout import label_mass as mass_on_labels
from .readout_plan import Readout, ReadoutPlan, fitted_probabilities, plan_readout
from .reducers import ConfidenceKind
from .schema import Answer, Content, DecisionRequest, DecisionResponse, Example, Question, Usage, json_sha256
from .tokenization import ChatTemplate, TextTokenizer


PROMPT_STATE = "<state>"  # the placeholder state a prompt's identity is compiled with (Decider.prompt_sha256)
PROMPT_INSTRUCTIONS = "<instructions>"  # and the placeholder question text of a head fitted on rows' own texts


def parse_request(data: DecisionRequest | Mapping[str, Any]) -> DecisionRequest:
    """Validate a wire request; errors name the field path (``questions.team.criteria``)."""
    if isinstance(data, DecisionRequest):
        return data
    try:
        return DecisionRequest.model_validate(data)
    except ValidationError as e:
        errors = []
        for err in e.errors(include_url=False):
            loc = list(err["loc"])
            # Drop the discriminator tag pydantic inserts: questions.team.choice.criteria → questions.team.criteria
            if len(loc) >= 3 and loc[0] == "questions" and loc[2] in ("noul", "choice", "score"):
                del loc[2]
            msg = err["msg"].removeprefix("Value error, ")
            errors.append((tuple(loc), msg))
        raise InvalidRequestError(errors[0][1], errors[0][0], errors=errors) from None


class Decider:
    """Answers System One requests with one exported model.

    Args:
        artifacts: a loaded export (see ``load``).
        label_mode: ``"auto"`` (default: per question type, what measured best on real data —
            names for choice, letters for score; ``compiler.AUTO_LABELS``), ``"names"`` (options
            read out by their names) or ``"letters"``.
        confidence: ``"typesafe"`` (default, the hosted API's formula), ``"bonsai"`` or ``"entropy"``.
        calibration: a calibration file (or its path); off by default, and visible on answers.
        threads: ONNX Runtime intra-op threads (default: the cores this process may use:
            its CPU affinity, capped by a cgroup CPU quota).
        cache_bytes: budget of the cross-request prefix cache (0 disables it).
        max_tokens: refuse prompts longer than this (default: the model's context length).
        max_batch_rows: rows per ONNX Runtime run (default 32; 1 for exports whose rows are not
            independent: per-tensor INT8, sliding-window attention).
        max_call_kv_bytes: KV-cache bytes one call may hold (each distinct token's KV once; the
            batch in flight adds at most 1 GiB more); a call that needs more is refused.
        cpu_check: for INT8 exports, check at load that this CPU computes what the export measured
            (typed_decisions.quantized); refuses or warns. Off only for studies.
        debias: ``"none"`` (default) or ``"rotate"``: the default for requests without a
            ``debias`` field (``debias.py``: each choice question asked under up to
            ``max_rotations`` cyclic rotations of its options, score levels both ways, averaged).
        wording: a name of ``wording.WORDINGS``: the system prompt and the question block's fixed
            sentences (default ``"default"``, the wording the runtime has always used).
        packed: tree blocks (a request's state, question suffixes and label branches in one
            row; never two requests in one row; docs/METHOD.md). Default: on for exports of
            format version 2 (float32 and per-token INT8), off for per-tensor INT8 and 2-D-mask
            graphs; False turns them off, True forces them on per-tensor INT8 (studies).
    """

    def __init__(self, artifacts: Artifacts, *, label_mode: LabelMode = "auto",
                 confidence: ConfidenceKind = reducers.DEFAULT_CONFIDENCE,
                 calibration: CalibrationFile | str | Path | None = None, threads: int | None = None,
                 providers: Sequence[str] | None = None, cache_bytes: int = 512 << 20,
                 max_tokens: int | None = None, max_batch_rows: int | None = None,
                 max_call_kv_bytes: int = 4 << 30, cpu_check: bool = True,
                 debias: Debias = "none", max_rotations: int = MAX_ROTATIONS, wording: str = "default",
                 packed: bool | None = None):
        if debias not in debiasing.DEBIAS_MODES:
            raise ValueError(f"debias must be one of {', '.join(debiasing.DEBIAS_MODES)}, got {debias!r}")
        debiasing.rotation_shifts(1, max_rotations)  # validates max_rotations >= 1
        self.artifacts = artifacts
        self.name = artifacts.name
        self.label_mode: LabelMode = label_mode
        self.debias: Debias = debias
        self.confidence_kind: ConfidenceKind = confidence
        self.tokenizer = TextTokenizer(artifacts.tokenizer_path, artifacts.tokenizer_info)
        self.template = ChatTemplate(artifacts.chat_template, self.tokenizer)
        limit = max_tokens or artifacts.architecture.max_position_embeddings
        self.compiler = Compiler(self.tokenizer, self.template, max_tokens=limit, max_rotations=max_rotations,
                                 wording=wording)
        self.engine = Engine(artifacts, threads=threads, providers=providers, cache_bytes=cache_bytes,
                             max_batch_rows=max_batch_rows, max_call_kv_bytes=max_call_kv_bytes,
                             cpu_check=cpu_check, packed=packed)
        if isinstance(calibration, (str, Path)):
            calibration = CalibrationFile.load(calibration)
        self.calibration: CalibrationFile | None = calibration
        self._cf_memo: dict[tuple[str, str, str, str], np.ndarray] = {}  # (mode, debias, cf state, question JSON) → p_cf
        self._cf_memo_examples: dict[tuple[str, str, str, str], dict[str, np.ndarray]] = {}  # … request JSON → p_cf
        self._cf_lock = threading.Lock()

    @classmethod
    def load(cls, model: str | Path, **kwargs: Any) -> Decider:
        """Load a model by export directory or catalogue name (``exports.locate``).

        ``model`` is a directory made by ``typed-decisions export ... --out DIR``, or a catalogue
        name or alias (``"default"``, ``"tiny"``; ``"default:int8"`` for its INT8 export) whose
        export is in the cache; a name without an export raises ``ArtifactError`` with the
        command that makes it. ``kwargs`` go to ``Decider(...)``.
        """
        return cls(load_artifacts(locate(model)), **kwargs)

    from_dir = load  # the older name: it accepts catalogue names too

    # -- public API

    def decide(self, state: Content, questions: Mapping[str, Question | Mapping[str, Any]], *,
               label_mode: LabelMode | None = None, debias: Debias | None = None,
               include: Sequence[str] = (),
               examples: Sequence[Example | Mapping[str, Any]] | None = None) -> DecisionResponse:
        """Ask typed questions about one state (``include=["label_mass"]`` adds the label mass;
        ``examples``: labelled few-shot examples ``{"state", "answers": {question: option}}``)."""
        body: dict[str, Any] = {"model": self.name, "state": state, "questions": dict(questions)}
        if debias is not None:
            body["debias"] = debias
        if include:
            body["include"] = list(include)
        if examples:
            body["examples"] = list(examples)
        return self.run(parse_request(body), label_mode=label_mode)

    def run(self, request: DecisionRequest | Mapping[str, Any], *,
            label_mode: LabelMode | None = None, debias: Debias | None = None) -> DecisionResponse:
        """Answer one wire-format request."""
        return self.run_many([request], label_mode=label_mode, debias=debias)[0]

    def run_many(self, requests: Sequence[DecisionRequest | Mapping[str, Any]], *,
                 label_mode: LabelMode | None = None, share_prefixes: bool = True,
                 use_cache: bool = True, debias: Debias | None = None,
                 heads: Sequence[Mapping[str, FittedHead] | None] | None = None) -> list[DecisionResponse]:
        """Answer several requests in one engine call (shared prefixes computed once).

        ``debias`` is the default for requests without their own field (else the Decider's).
        ``heads``: per request, fitted heads by question name (``fitted.py``, ``fit``): those
        questions are answered by their head, from the hidden state this call computes anyway;
        a head that was fitted for another export, prompt or reading is refused (``check_heads``)."""
        parsed = [parse_request(r) for r in requests]
        mode, deb = label_mode or self.label_mode, debias or self.debias
        per_request = list(heads) if heads is not None else [None] * len(parsed)
        if len(per_request) != len(parsed):
            raise ValueError(f"heads: one entry per request ({len(parsed)}), got {len(per_request)}")
        for req, hs in zip(parsed, per_request):
            self.check_heads(req, hs or {}, label_mode=mode, debias=deb)
        compiled = [self.compiler.compile(r, label_mode=mode, debias=deb) for r in parsed]
        wants = [bool(r.include and "label_mass" in r.include) for r in parsed]
        readouts = self._read(compiled, share_prefixes=share_prefixes, use_cache=use_cache, label_mass=wants,
                              hidden=[bool(h) for h in per_request])
        content_free = self._content_free(parsed, mode, deb)
        out = []
        for req, comp, reads, cf, hs in zip(parsed, compiled, readouts, content_free, per_request):
            answers: dict[str, Answer] = {}
            for r in reads:
                answers[r.question.name] = self._answer(r, cf.get(r.question.name) if cf else None,
                                                        head=(hs or {}).get(r.question.name))
            out.append(DecisionResponse(model=self.name, answers=answers,
                                        usage=Usage(input_tokens=comp.logical_tokens, output_tokens=0)))
        return out

    def probabilities(self, request: DecisionRequest | Mapping[str, Any], *,
                      label_mode: LabelMode | None = None, share_prefixes: bool = True,
                      use_cache: bool = True, debias: Debias | None = None) -> dict[str, np.ndarray]:
        """Uncalibrated option probabilities per question (float64), in option order."""
        reads = self.readouts(request, label_mode=label_mode, share_prefixes=share_prefixes,
                              use_cache=use_cache, debias=debias)
        return {name: r.probabilities() for name, r in reads.items()}

    def readouts(self, request: DecisionRequest | Mapping[str, Any], *,
                 label_mode: LabelMode | None = None, share_prefixes: bool = True,
                 use_cache: bool = True, debias: Debias | None = None,
                 label_mass: bool = False, hidden: bool = False) -> dict[str, Readout]:
        """The raw readouts per question (probabilities, rotations, label mass when asked for, the
        answer position's hidden state with ``hidden``): what evaluation rows record."""
        req = parse_request(request)
        comp = self.compiler.compile(req, label_mode=label_mode or self.label_mode,
                                     debias=debias or self.debias)
        (reads,) = self._read([comp], share_prefixes=share_prefixes, use_cache=use_cache,
                              label_mass=[label_mass or bool(req.include and "label_mass" in req.include)],
                              hidden=[hidden])
        return {r.question.name: r for r in reads}

    def explain(self, request: DecisionRequest | Mapping[str, Any], *,
                label_mode: LabelMode | None = None, debias: Debias | None = None,
                heads: Mapping[str, FittedHead] | None = None) -> Explanation:
        """The request answered and explained (``explain.Explanation``): the prompt and its
        shared-prefix boundary, per question every option's label tokens with their logits and
        probabilities, the trie nodes, the answers (exactly ``run``'s) and what was computed."""
        t0 = time.perf_counter()
        req = parse_request(request)
        mode, deb = label_mode or self.label_mode, debias or self.debias
        heads = heads or {}
        self.check_heads(req, heads, label_mode=mode, debias=deb)
        comp = self.compiler.compile(req, label_mode=mode, debias=deb)
        before = self.engine.stats.tokens_computed
        (reads,) = self._read([comp], share_prefixes=True, use_cache=True, label_mass=[True], hidden=[bool(heads)])
        computed = self.engine.stats.tokens_computed - before  # this call's (other threads may add)
        (cf,) = self._content_free([req], mode, deb)
        token = self.tokenizer.token_str
        questions: dict[str, QuestionExplanation] = {}
        for r in reads:
            q = r.question
            head = heads.get(q.name)
            answer = self._answer(r, cf.get(q.name) if cf else None,
                                  with_mass=bool(req.include and "label_mass" in req.include), head=head)
            questions[q.name] = explain_question(r, answer, req.questions[q.name], token,
                                                  self.tokenizer.decode, self.confidence_kind, comp.debias)
            if head is not None:
                questions[q.name].fitted = explain_head(head, r)
        answers = {name: qe.answer for name, qe in questions.items()}
        logical = comp.logical_tokens
        return Explanation(
            model=self.name, label_mode=comp.label_mode, prefix_text=self.tokenizer.decode(list(comp.prefix_ids)),
            prefix_ids=list(comp.prefix_ids), questions=questions, answers=answers,
            usage=Usage(input_tokens=logical, output_tokens=0),
            tokens=TokenAccount(prefix_tokens=len(comp.prefix_ids),
                                prompt_tokens=len(comp.prefix_ids) + sum(len(q.suffix_ids) for _, _, q in comp.units()),
                                input_tokens=logical, tokens_computed=computed,
                                tokens_saved=max(0, logical - computed)),
            latency_ms=round((time.perf_counter() - t0) * 1000, 2))

    # -- fitted heads (fitted.py)

    @property
    def model_key(self) -> str:
        """The name presets key fitted heads and calibrations by: the model's name, plus ':int8'
        (the weight type) for an INT8 export, whose hidden states drift from its float model's."""
        quant = self.artifacts.quantization
        return self.name if not isinstance(quant, dict) else f"{self.name}:{quant.get('weight_type', 'int8')}"

    @property
    def export_sha256(self) -> str:
        """The export's identity: the canonical hash of its manifest's file hashes."""
        return json_sha256(self.artifacts.manifest.get("files") or {})

    def prompt_sha256(self, question: Question | Mapping[str, Any], classes: Sequence[str] | None = None, *,
                      label_mode: LabelMode | None = None, debias: Debias | None = None,
                      examples: Sequence[Example | Mapping[str, Any]] | None = None,
                      own_instructions: bool = False) -> str:
        """The identity of a question's prompt: sha256 of its token ids (system text, template,
        examples, question text, options in ``classes`` order with their labels) compiled with a
        placeholder state, and the label mode and debias it was read with. ``own_instructions``:
        the question text is a placeholder too (a head fitted on rows that each ask their own)."""
        q = question if isinstance(question, Mapping) else question.model_dump(mode="json", exclude_none=True)
        if own_instructions:
            q = {**q, "instructions": PROMPT_INSTRUCTIONS}
        if classes is not None and q.get("type") == "choice":
            crit = q["criteria"]
            q = {**q, "criteria": {c: crit[c] for c in classes}}
        body: dict[str, Any] = {"model": self.name, "state": PROMPT_STATE, "questions": {"q": q}}
        if examples:
            body["examples"] = [e.model_dump(mode="json", exclude_none=True) if isinstance(e, Example) else e
                                for e in examples]
        deb = debias or self.debias
        comp = self.compiler.compile(parse_request(body), label_mode=label_mode or self.label_mode, debias=deb)
        (cq,) = comp.questions
        return json_sha256({"prompt": list(comp.prefix_ids + cq.suffix_ids), "labels": cq.label_mode,
                            "paths": [list(p) for p in cq.label_paths.paths], "debias": comp.debias})

    def check_heads(self, request: DecisionRequest | Mapping[str, Any], heads: Mapping[str, FittedHead], *,
                    label_mode: LabelMode | None = None, debias: Debias | None = None) -> None:
        """Refuse (InvalidRequestError at ``heads.<question>``) a head that was fitted for another
        model, export, prompt or reading of its question than this request's."""
        req = parse_request(request)
        mode, deb = label_mode or self.label_mode, debias or self.debias
        for name, head in heads.items():
            if name not in req.questions:
                raise InvalidRequestError(f"{name!r} is not a question of the request ({list(req.questions)})",
                                          ("heads", name))
            q = req.questions[name]
            labels = resolve_label_mode(q.type, mode)
            try:
                head.order(self.option_keys(q))
            except ValueError as e:
                raise InvalidRequestError(str(e), ("heads", name)) from None
            why = head.refusal(model=self.model_key, export_sha256=self.export_sha256,
                               prompt_sha256=self.prompt_sha256(q, head.classes, label_mode=mode, debias=req.debias or deb,
                                                                examples=req.examples,
                                                                own_instructions=head.own_instructions),
                               labels=labels, debias=req.debias or deb, wording=self.compiler.wording_name)
            if why:
                raise InvalidRequestError(f"the fitted head cannot answer this question: {why}", ("heads", name))

    def fit(self, question: Question | Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *,
            rotations: int | None = None, label_mode: LabelMode | None = None, debias: Debias | None = None,
            examples: Sequence[Example | Mapping[str, Any]] | None = None, components: int = 256,
            class_weight: str = "balanced", prior: str | Sequence[float] = "rows", folds: int = 5, batch: int = 16,
            calibrate: str = "none", progress: bool = False, command: str = "") -> FittedHead:
        """Fit a head for ``question`` on labelled ``rows`` ``{"state", "answer", "instructions"?}``
        (``answer``: an option key — choice: its name; score: a level number; noul: yes/no or a
        bool; ``instructions``: the row's own question text). Each row is read once (``features``);
        choice rows under ``rotations`` cyclic option orders, so the head learns the options, not
        their places: by default every rotation, at most ``MAX_ROTATIONS`` (8) evenly spaced, and one
        order under ``debias="canonical"`` (one prompt for every listing). A head read in the listed
        order only learns the places too: on the default model it flipped 42.5 % of binary answers
        when the two options were swapped, against 2.5 % fitted over both orders (docs/evaluation.md,
        "Option order of fitted heads"). ``prior``: the class frequencies the head assumes where it
        answers — "rows" (the rows' own), "uniform", or one frequency per option (when the rows were
        not sampled as the answers occur, e.g. k per class); ``calibrate="temperature"`` divides the
        head's logits by the temperature that fits its cross-validated predictions. Needs scikit-learn
        (``fit.py``); errors name the row and field."""
        q = self.parse_question(question)
        classes = self.option_keys(q)
        gold = [self._row_answer(row, i, classes) for i, row in enumerate(rows)]
        check_rows_per_class(gold, classes)
        canonical = (debias or self.debias) == "canonical"
        if q.type != "choice":
            n_orders = 1
        elif rotations is None:
            n_orders = 1 if canonical else len(rotation_shifts(len(classes)))
        else:
            n_orders = rotations
        if n_orders < 1:
            raise ValueError(f"rotations must be >= 1, got {rotations}")
        if n_orders > 1 and canonical:
            raise ValueError(f"rotations={rotations} would read each row {rotations} times the same prompt: under "
                             "debias='canonical' the options are shown in one order whatever the listing; use rotations=1")
        hidden, probs, groups = self.features(q, rows, rotations=n_orders, label_mode=label_mode, debias=debias,
                                              examples=examples, batch=batch, progress=progress)
        y = np.repeat(np.asarray(gold), n_orders)
        result = fit_head(hidden, probs, y, components=components, class_weight=class_weight,  # type: ignore[arg-type]
                          prior=prior, folds=folds, groups=groups if n_orders > 1 else None,  # type: ignore[arg-type]
                          calibrate=calibrate)  # type: ignore[arg-type]
        mode, deb = label_mode or self.label_mode, debias or self.debias
        own = any(row.get("instructions") is not None for row in rows)
        counts = np.bincount(np.asarray(gold), minlength=len(classes))
        report = FitReport(rows=len(rows), rows_per_class={c: int(k) for c, k in zip(classes, counts)},
                           components=result.components, l2=result.l2, folds=result.folds,
                           cv_accuracy=result.cv_accuracy, cv_nll=result.cv_nll,
                           zero_shot_cv_accuracy=result.zero_shot_accuracy, rotations=n_orders,
                           cv_gain=None if result.cv_gain is None else [round(x, 4) for x in result.cv_gain],
                           class_weight=class_weight, prior=prior if isinstance(prior, str) else [float(x) for x in prior],  # type: ignore[arg-type]
                           temperature=round(result.temperature, 6), seconds=round(result.seconds, 3),
                           date=time.strftime("%Y-%m-%d"), command=command)
        return FittedHead(
            question_type=q.type, classes=classes, model=self.model_key, export_sha256=self.export_sha256,
            prompt_sha256=self.prompt_sha256(q, classes, label_mode=mode, debias=deb, examples=examples,
                                             own_instructions=own), own_instructions=own,
            rows_sha256=json_sha256([{k: row[k] for k in ("state", "answer", "instructions") if k in row}
                                     for row in rows]),
            labels=resolve_label_mode(q.type, mode), debias=deb, wording=self.compiler.wording_name,
            mean=result.mean, scale=result.scale, weights=result.weights, bias=result.bias, fitted=report)

    def features(self, question: Question | Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *,
                 rotations: int = 1, label_mode: LabelMode | None = None, debias: Debias | None = None,
                 examples: Sequence[Example | Mapping[str, Any]] | None = None, batch: int = 16,
                 progress: bool = False, layers: bool = False) -> tuple[np.ndarray, ...]:
        """What a head reads, per row and option order (row-major): the hidden state at the answer
        position (n·R, H), the zero-shot probabilities in the question's option order (n·R, C),
        and each line's row index (the CV groups). ``rotations`` R: the options listed from the
        ``j·C/R``-th on (choice only). ``layers=True`` adds a fourth array, the mid-layer states
        there (n·R, L, H), L = ``engine.hidden_layers`` (an error for an export without them)."""
        from tqdm.auto import tqdm

        q = self.parse_question(question)
        classes = self.option_keys(q)
        dumped = q.model_dump(mode="json", exclude_none=True)
        shifts = [j * len(classes) // rotations for j in range(rotations)]
        bodies, groups = [], []
        for i, row in enumerate(rows):
            if "state" not in row:
                raise InvalidRequestError(f"rows[{i}] has no 'state'", ("rows", i, "state"))
            for shift in shifts:
                qd = dict(dumped)
                if shift:
                    names = classes[shift:] + classes[:shift]
                    qd["criteria"] = {c: dumped["criteria"][c] for c in names}
                if row.get("instructions") is not None:
                    qd["instructions"] = row["instructions"]
                body: dict[str, Any] = {"model": self.name, "state": row["state"], "questions": {"q": qd}}
                if examples:
                    body["examples"] = [e.model_dump(mode="json", exclude_none=True) if isinstance(e, Example) else e
                                        for e in examples]
                bodies.append(body)
                groups.append(i)
        mode, deb = label_mode or self.label_mode, debias or self.debias
        if layers:
            self.engine.require_layers()
        hidden, probs, mids = [], [], []
        for at in tqdm(range(0, len(bodies), batch), desc="features", unit="batch", disable=not progress):
            parsed = [parse_request(b) for b in bodies[at : at + batch]]
            compiled = [self.compiler.compile(r, label_mode=mode, debias=deb) for r in parsed]
            for (r,) in self._read(compiled, share_prefixes=True, use_cache=True, hidden=[True] * len(compiled),
                                   layers=layers):
                assert r.hidden is not None
                idx = [list(r.question.options).index(c) for c in classes]
                hidden.append(r.hidden.astype(np.float64))
                probs.append(r.probabilities()[idx])
                mids.append(r.layers)
        out = (np.stack(hidden), np.stack(probs), np.asarray(groups))
        return (*out, np.stack(mids).astype(np.float64)) if layers else out

    @staticmethod
    def parse_question(question: Question | Mapping[str, Any]) -> Question:
        """A wire question (dict) validated as one; errors name its field (``questions.q.…``)."""
        if not isinstance(question, Mapping):
            return question
        req = parse_request({"model": "-", "state": "", "questions": {"q": dict(question)}})
        return req.questions["q"]

    @staticmethod
    def _row_answer(row: Mapping[str, Any], i: int, classes: Sequence[str]) -> int:
        """A row's gold class index; refuses a row without a label or with one not among the options."""
        if "answer" not in row or row["answer"] is None:
            raise InvalidRequestError(f"rows[{i}] has no 'answer' (the option it should get)", ("rows", i, "answer"))
        raw = row["answer"]
        key = ("yes" if raw else "no") if isinstance(raw, bool) else str(raw)
        if key not in classes:
            raise InvalidRequestError(f"rows[{i}].answer: {raw!r} is not an option of the question ({list(classes)})",
                                      ("rows", i, "answer"))
        return list(classes).index(key)

    @staticmethod
    def option_keys(q: Question) -> list[str]:  # noqa: D401
        """A question's option keys as its answers name them (choice: names; score: '0'..; noul: yes, no)."""
        if q.type == "choice":
            return list(q.criteria)
        if q.type == "score":
            return [str(i) for i in range(len(q.criteria))]
        return ["yes", "no"]

    # -- internals

    def _read(self, compiled: Sequence[CompiledRequest], *, share_prefixes: bool,
              use_cache: bool, label_mass: Sequence[bool] = (), hidden: Sequence[bool] = (),
              layers: bool = False) -> list[list[Readout]]:
        """One engine call for every prompt of ``compiled``; ``label_mass[i]``: read the label
        mass of request i's prompts (one full-vocabulary product each, at its trie root);
        ``hidden[i]``: keep the hidden state at each of request i's trie roots (``Readout.hidden``),
        and with ``layers`` its mid-layer states there too (``Readout.layers``)."""
        wants = list(label_mass) or [False] * len(compiled)
        keep = list(hidden) or [False] * len(compiled)
        plan = plan_readout(compiled, read_roots=[w or k for w, k in zip(wants, keep)])
        points = [compiled[ri].checkpoints for ri, _, _ in plan.where]  # each context's request's checkpoints
        hiddens: list[np.ndarray] | None = [] if any(wants) or any(keep) else None
        owners = [ri for ri, _, _ in plan.where]  # a request's own nodes stay its own (one answer per request)
        mids: list[np.ndarray] | None = [] if layers and any(keep) else None
        logits = self.engine.next_token_logits(plan.contexts, plan.allowed, cache_points=points,
                                               use_cache=use_cache, share_prefixes=share_prefixes,
                                               owners=owners, hidden_out=hiddens,
                                               layers_out=mids)
        masses = None
        if hiddens is not None:
            masses = {}
            for i in plan.roots():
                ri, ui, _ = plan.where[i]
                if wants[ri]:
                    masses[(ri, ui)] = mass_on_labels(logits[i], self.engine.full_logsumexp(hiddens[i]))
        kept = None
        if hiddens is not None and any(keep):
            kept = {plan.where[i][:2]: hiddens[i] for i in plan.roots() if keep[plan.where[i][0]]}
        kept_layers = None if mids is None else {plan.where[i][:2]: mids[i] for i in plan.roots()
                                                 if keep[plan.where[i][0]]}
        return plan.readouts(logits, masses if any(wants) else None, kept, kept_layers)

    def _content_free(self, requests: Sequence[DecisionRequest], mode: LabelMode, debias: Debias = "none"
                      ) -> list[dict[str, np.ndarray] | None]:
        """Content-free probabilities for contextual calibration (only when the file asks for it).

        p_cf depends only on the question (and label mode), not on the request's state, so each
        question's p_cf is computed once and memoized: a router asking the same question of every
        message pays for it on the first message only. A request with few-shot examples shows
        every question's example turns before each question, so its p_cf is read from the whole
        request (its questions and examples) with the content-free state, memoized on both."""
        cal = self.calibration
        if cal is None or not any(c.contextual for c in cal.per_type.values()):
            return [None] * len(requests)
        out: list[dict[str, np.ndarray] | None] = []
        for req in requests:
            wanted = {n: q for n, q in req.questions.items() if cal.for_type(q.type).contextual}
            if not wanted:
                out.append(None)
                continue
            probs: dict[str, np.ndarray] = {}
            deb = req.debias or debias  # the request's own field wins, as in compile
            if req.examples:
                probs = self._content_free_with_examples(req, mode, deb)
                out.append({n: probs[n] for n in wanted})
                continue
            for name, q in wanted.items():
                key = (mode, deb, cal.content_free_state or "", q.model_dump_json())
                with self._cf_lock:
                    hit = self._cf_memo.get(key)
                if hit is None:
                    cf_req = DecisionRequest(model=req.model, state=cal.content_free_state or "", questions={name: q})
                    hit = self.probabilities(cf_req, label_mode=mode, debias=deb)[name]
                    with self._cf_lock:
                        self._cf_memo[key] = hit
                        while len(self._cf_memo) > 1024:
                            self._cf_memo.pop(next(iter(self._cf_memo)))
                probs[name] = hit
            out.append(probs)
        return out

    def _content_free_with_examples(self, req: DecisionRequest, mode: LabelMode, deb: Debias
                                    ) -> dict[str, np.ndarray]:
        """p_cf of every question of a request with examples: the same request, content-free state."""
        cal = self.calibration
        assert cal is not None
        cf_state = cal.content_free_state or ""
        key = (mode, deb, cf_state, req.model_copy(update={"state": cf_state, "include": None}).model_dump_json())
        with self._cf_lock:
            hit = self._cf_memo_examples.get(key)
        if hit is None:
            cf_req = req.model_copy(update={"state": cf_state, "include": None})
            hit = self.probabilities(cf_req, label_mode=mode, debias=deb)
            with self._cf_lock:
                self._cf_memo_examples[key] = hit
                while len(self._cf_memo_examples) > 1024:
                    self._cf_memo_examples.pop(next(iter(self._cf_memo_examples)))
        return hit

    def _answer(self, r: Readout, content_free: np.ndarray | None, *, with_mass: bool = True,
                head: FittedHead | None = None) -> Answer:
        q = r.question
        p = r.probabilities()
        applied = None
        if head is not None:  # the fitted head replaces calibration: it was fitted on raw p
            p = fitted_probabilities(head, r)
            applied = f"fitted head {head.id} ({head.model}, {head.fitted.rows if head.fitted else '?'} rows)"
        elif self.calibration is not None:
            tc = self.calibration.for_type(q.type)
            if tc.temperature != 1.0 or tc.contextual:
                p = calibrate(p, tc.temperature, content_free if tc.contextual else None)
                applied = (f"{self.calibration.model}@v{self.calibration.version}: T={tc.temperature:g}"
                           + (", contextual" if tc.contextual else ""))
        if q.type == "noul":
            answer: Answer = reducers.reduce_noul(p)
        elif q.type == "choice":
            answer = reducers.reduce_choice(p, list(q.options), self.confidence_kind)
        else:
            answer = reducers.reduce_score(p, [q.legend[k] for k in q.options], self.confidence_kind)
        answer.calibration = applied
        if with_mass:
            answer.label_mass = r.mean_label_mass()  # None unless the request asked for it
        return answer


__all__ = ["Decider", "Readout", "ReadoutPlan", "fitted_probabilities", "parse_request", "plan_readout"]  # planning: readout_plan.py
