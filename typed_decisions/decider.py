"""The Decider: requests in, typed answers out. The thin shell that joins the pipeline stages.

    request ─ settings ─ compiler ─▶ prefix + suffixes + label tries ─ engine ─▶ logits per trie node
            ─ readout ─▶ option probabilities ─ answers (head | calibration, then reducers) ─▶ answers

All questions of all requests passed together go to the engine in ONE call, so the state prefix is
prefilled once, question suffixes run as one batch, and multi-token label branches as another.
Each request's reading (label mode, debias, wording, calibration file) is resolved once
(``settings.py``) and carried down. The work lives beside it: ``answers.py`` (readout → answer),
``content_free.py`` (p_cf, kept), ``heads.py`` (fitting and checking heads), ``explain.py``.

>>> decider = Decider.load("tiny")     # a catalogue name, or an export directory  # doctest: +SKIP
>>> decider.decide("I was charged twice.", {"team": Choice(criteria={"billing": None, "tech": None})})  # doctest: +SKIP
DecisionResponse(model='tiny', answers={'team': ChoiceAnswer(choice='billing', ...)}, usage=...)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import debias as debiasing
from . import heads as heads_
from . import reducers
from .answers import QuestionHead, answer_question
from .artifacts import Artifacts, load_artifacts
from .calibration import CalibrationFile
from .compiler import CompiledRequest, Compiler, LabelMode
from .content_free import ContentFreeCache, content_free_probabilities
from .debias import MAX_ROTATIONS, Debias
from .engine import Engine
from .explain import Explanation, QuestionExplanation, TokenAccount, explain_head, explain_question
from .exports import locate
from .fitted import FittedHead
from .readout import label_mass as mass_on_labels
from .readout_plan import Readout, ReadoutPlan, fitted_probabilities, plan_readout
from .reducers import ConfidenceKind
from .schema import (Content, DecisionRequest, DecisionResponse, Example, Question, Usage, json_sha256, option_keys,
                     parse_question, parse_request)
from .settings import Settings
from .tokenization import ChatTemplate, TextTokenizer


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
        self.content_free = ContentFreeCache(maxsize=1024)  # p_cf by question and reading (content_free.py)

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

    def settings(self, request: DecisionRequest | None = None, *, label_mode: LabelMode | None = None,
                 debias: Debias | None = None) -> Settings:
        """How ``request`` is read (``settings.py``): the call's ``label_mode`` / ``debias`` and the
        request's own ``debias`` field over this Decider's defaults (None: a call with no request)."""
        own = Settings(self.label_mode, self.debias, self.compiler.wording_name, self.calibration)
        return own.resolve(request, label_mode=label_mode, debias=debias)

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
                 heads: Sequence[Mapping[str, QuestionHead] | None] | None = None) -> list[DecisionResponse]:
        """Answer several requests in one engine call (shared prefixes computed once).

        ``debias`` is the default for requests without their own field (else the Decider's).
        ``heads``: per request, by question name, what answers in place of the zero-shot readout
        and the Decider's file: a fitted head (``fitted.py``, ``fit``), read from the hidden state
        this call computes anyway, or a preset's fixed calibration (``calibration.FixedCalibration``);
        a head fitted for another export, prompt or reading is refused (``check_heads``). A request
        with fitted heads and no debias of its own (nor ``debias=``) is read under the heads' debias
        (``fit`` reads choice rows with ``canonical``)."""
        parsed = [parse_request(r) for r in requests]
        per_request = list(heads) if heads is not None else [None] * len(parsed)
        if len(per_request) != len(parsed):
            raise ValueError(f"heads: one entry per request ({len(parsed)}), got {len(per_request)}")
        settings = [self.settings(r, label_mode=label_mode, debias=debias or heads_.heads_debias(hs))
                    for r, hs in zip(parsed, per_request)]
        for req, hs, s in zip(parsed, per_request, settings):
            self.check_heads(req, hs or {}, settings=s)
        compiled = [self.compiler.compile(r, settings=s) for r, s in zip(parsed, settings)]
        wants = [bool(r.include and "label_mass" in r.include) for r in parsed]
        readouts = self.read(compiled, share_prefixes=share_prefixes, use_cache=use_cache, label_mass=wants,
                             hidden=[any(isinstance(h, FittedHead) for h in (hs or {}).values()) for hs in per_request],
                             layers=any(heads_.reads_mid_layers(hs) for hs in per_request))
        out = []
        for req, s, comp, reads, hs in zip(parsed, settings, compiled, readouts, per_request):
            cf = content_free_probabilities(req, s, self.content_free, self._probabilities) or {}
            answers = {r.question.name: answer_question(r, confidence=self.confidence_kind, calibration=s.calibration,
                                                        content_free=cf.get(r.question.name),
                                                        head=(hs or {}).get(r.question.name))
                       for r in reads}
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
        comp = self.compiler.compile(req, settings=self.settings(req, label_mode=label_mode, debias=debias))
        (reads,) = self.read([comp], share_prefixes=share_prefixes, use_cache=use_cache,
                             label_mass=[label_mass or bool(req.include and "label_mass" in req.include)],
                             hidden=[hidden])
        return {r.question.name: r for r in reads}

    def explain(self, request: DecisionRequest | Mapping[str, Any], *,
                label_mode: LabelMode | None = None, debias: Debias | None = None,
                heads: Mapping[str, QuestionHead] | None = None) -> Explanation:
        """The request answered and explained (``explain.Explanation``): the prompt and its
        shared-prefix boundary, per question every option's label tokens with their logits and
        probabilities, the trie nodes, the answers (exactly ``run``'s) and what was computed."""
        t0 = time.perf_counter()
        req = parse_request(request)
        heads = heads or {}
        s = self.settings(req, label_mode=label_mode, debias=debias or heads_.heads_debias(heads))
        self.check_heads(req, heads, settings=s)
        comp = self.compiler.compile(req, settings=s)
        before = self.engine.stats.tokens_computed
        (reads,) = self.read([comp], share_prefixes=True, use_cache=True, label_mass=[True],
                             hidden=[any(isinstance(h, FittedHead) for h in heads.values())],
                             layers=heads_.reads_mid_layers(heads))
        computed = self.engine.stats.tokens_computed - before  # this call's (other threads may add)
        cf = content_free_probabilities(req, s, self.content_free, self._probabilities) or {}
        questions: dict[str, QuestionExplanation] = {}
        for r in reads:
            q, head = r.question, heads.get(r.question.name)
            answer = answer_question(r, confidence=self.confidence_kind, calibration=s.calibration,
                                     content_free=cf.get(q.name), head=head,
                                     with_mass=bool(req.include and "label_mass" in req.include))
            questions[q.name] = explain_question(r, answer, req.questions[q.name], self.tokenizer.token_str,
                                                 self.tokenizer.decode, self.confidence_kind, comp.debias)
            if isinstance(head, FittedHead):
                questions[q.name].fitted = explain_head(head, r)
        logical = comp.logical_tokens
        return Explanation(
            model=self.name, label_mode=comp.label_mode, prefix_text=self.tokenizer.decode(list(comp.prefix_ids)),
            prefix_ids=list(comp.prefix_ids), questions=questions,
            answers={name: qe.answer for name, qe in questions.items()},
            usage=Usage(input_tokens=logical, output_tokens=0),
            tokens=TokenAccount(prefix_tokens=len(comp.prefix_ids),
                                prompt_tokens=len(comp.prefix_ids) + sum(len(q.suffix_ids) for _, _, q in comp.units()),
                                input_tokens=logical, tokens_computed=computed,
                                tokens_saved=max(0, logical - computed)),
            latency_ms=round((time.perf_counter() - t0) * 1000, 2))

    # -- fitted heads (heads.py does the work; fitted.py is the head)

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

    fit = heads_.fit                      # fit(question, rows, *, rotations, label_mode, debias, ...) → FittedHead
    features = heads_.features            # features(question, rows, *, rotations, ...) → (hidden, probs, groups)
    prompt_sha256 = heads_.prompt_sha256  # prompt_sha256(question, classes, *, label_mode, debias, ...) → str
    check_heads = heads_.check_heads      # check_heads(request, heads, *, label_mode, debias, settings) → None
    parse_question = staticmethod(parse_question)
    option_keys = staticmethod(option_keys)

    # -- the engine call

    def read(self, compiled: Sequence[CompiledRequest], *, share_prefixes: bool = True,
             use_cache: bool = True, label_mass: Sequence[bool] = (), hidden: Sequence[bool] = (),
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
                                               owners=owners, hidden_out=hiddens, layers_out=mids)
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
        return plan.readouts(logits, masses if any(wants) else None, kept, kept_layers,
                             layer_ids=self.engine.hidden_layers if mids is not None else ())

    def _probabilities(self, request: DecisionRequest, settings: Settings) -> dict[str, np.ndarray]:
        """Uncalibrated option probabilities of a request read under resolved settings (p_cf)."""
        (reads,) = self.read([self.compiler.compile(request, settings=settings)], label_mass=[False])
        return {r.question.name: r.probabilities() for r in reads}


__all__ = ["Decider", "Readout", "ReadoutPlan", "fitted_probabilities", "parse_request", "plan_readout"]  # planning: readout_plan.py
