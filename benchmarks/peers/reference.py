"""The ``reference`` peer: what a user would write with transformers/PyTorch, and the oracle.

Every readout context (prefix + question suffix + label-trie node prefix) runs as a full prompt,
all of a request's contexts in left-padded batches, no KV reuse, ``last_hidden_state[:, -1] @
lm_head[allowed].T``, then the same chain rule (``readout.option_probabilities``). Its
probabilities are compared with ours (``max_abs_dp_vs_ours_fp32``; tests/benchmarks hold them to
1e-5 on the tiny model). ``readout_plan`` is ``Decider``'s own plan, so every peer reads exactly
what ours reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def readout_plan(comp: Any) -> Any:
    """The contexts, allowed ids and trie nodes of one compiled request: ``Decider``'s own plan
    (``readout_plan.plan_readout``), so every peer reads exactly what ours reads."""
    from typed_decisions.readout_plan import plan_readout

    return plan_readout([comp])


def probabilities_from(plan: Any, logits: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Option probabilities per question from a peer's logits (one per context of ``plan``)."""
    return {r.question.name: r.probabilities() for r in plan.readouts(logits)[0]}


class Reference:
    """transformers, every context a full prompt, left-padded batches of ≤ ``batch_tokens`` tokens."""

    def __init__(self, model: Any, batch_tokens: int = 4096):
        import torch

        self.torch, self.model = torch, model
        self.w = model.get_output_embeddings().weight.detach()              # (vocab, H)
        self.pad = int(model.config.pad_token_id or 0) if hasattr(model.config, "pad_token_id") else 0
        self.batch_tokens = batch_tokens

    def cost(self, contexts: list[tuple[int, ...]]) -> int:
        return len(contexts) * max(len(c) for c in contexts)

    def logits(self, contexts: list[tuple[int, ...]], allowed: list[tuple[int, ...]]) -> tuple[list[np.ndarray], int]:
        torch = self.torch
        order = sorted(range(len(contexts)), key=lambda i: len(contexts[i]))
        out: list[np.ndarray | None] = [None] * len(contexts)
        computed, start = 0, 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end + 1 - start) * len(contexts[order[end]]) <= self.batch_tokens:
                end += 1
            rows = order[start:end]
            s = max(len(contexts[i]) for i in rows)
            ids = torch.full((len(rows), s), self.pad, dtype=torch.long)                  # (B, S) left-padded
            mask = torch.zeros((len(rows), s), dtype=torch.long)
            for b, i in enumerate(rows):
                ids[b, s - len(contexts[i]):] = torch.tensor(contexts[i])
                mask[b, s - len(contexts[i]):] = 1
            pos = (mask.cumsum(-1) - 1).clamp(min=0)                                       # (B, S)
            with torch.no_grad():
                h = self.model.model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                     use_cache=False).last_hidden_state[:, -1]             # (B, H)
                for b, i in enumerate(rows):
                    out[i] = (self.w[list(allowed[i])].double() @ h[b].double()).numpy()
            computed += len(rows) * s
            start = end
        return out, computed  # type: ignore[return-value]
