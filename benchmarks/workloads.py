"""The requests every benchmark shares: W1-W4 (bench.py's workloads), W5's tickets, the warm-up,
jevcompat's many-option choice (``queue_choice``, many_options.py).

Workloads (states are a synthetic support ticket cut at a token count of the model's tokenizer):
W1 one noul about a ~100-token state; W2 choice of 5 + noul + score of 5 about a ~300-token state;
W3 a 20-option choice; W4 a 200-option choice ("billing refunds" ... 20 areas x 10 aspects); W4-5
five options of the same list about the same state (the base of the W4 ratio); W5 W2's three
questions about N different tickets (``w5_requests``).
"""

from __future__ import annotations

from typing import Any

SENTENCES = [
    "Hi, I was billed twice this month for the Pro plan, two charges of $29 on March 3.",
    "Please refund the duplicate charge as soon as possible, I am on a tight budget.",
    "I also noticed that the invoice PDF for February is missing from the billing page.",
    "When I try to download it the page shows an error and then logs me out.",
    "My team of five uses the dashboard every day to track support tickets.",
    "We upgraded from the Basic plan in January because we needed the export feature.",
    "The export to CSV works, but the date column is in the wrong time zone.",
    "Last week the mobile app crashed twice while I was editing a ticket.",
    "I contacted support by chat on Monday but nobody answered after twenty minutes.",
    "Our contract renewal is next month and we are considering other vendors.",
    "If the refund is not processed by Friday I will have to dispute the charge with my bank.",
    "Could you also confirm whether the annual plan includes priority support?",
    "The password reset email arrived only after three attempts.",
    "Thanks for your help, and sorry for the long message. Best regards, Dana",
]

AREAS = ["billing", "technical", "sales", "security", "legal", "shipping", "accounts", "mobile",
         "api", "onboarding", "partners", "privacy", "hardware", "network", "reporting", "training",
         "marketing", "compliance", "procurement", "facilities"]
ASPECTS = ["refunds", "outages", "upgrades", "access", "contracts", "delays", "invoices", "crashes",
           "limits", "questions"]


def make_state(tok: Any, n_tokens: int, first: int = 0, head: str = "") -> str:
    """A support ticket of about ``n_tokens`` tokens: ``head``, then the sentences cycled from
    ``first`` until the count is reached."""
    text, i = head, first
    while len(tok.encode_plain(text)) < n_tokens:
        text += ("" if not text else " ") + SENTENCES[i % len(SENTENCES)]
        i += 1
    return text


def workloads(tok: Any) -> dict[str, dict[str, Any]]:
    """Wire-format requests per workload."""
    s100, s300 = make_state(tok, 100), make_state(tok, 300)
    team5 = {"billing": "Payments, invoices, refunds", "technical": "Bugs, errors, outages",
             "sales": "Pricing, upgrades, contracts", "security": "Accounts, passwords, access",
             "other": "Anything else"}
    noul = {"type": "noul", "instructions": "Does the customer ask for money back?"}
    score = {"type": "score", "instructions": "How urgent is this ticket?",
             "criteria": ["Can wait", "This month", "This week", "Today", "Right now"]}
    names200 = [f"{a} {b}" for a in AREAS for b in ASPECTS]
    choice = lambda names: {"type": "choice", "instructions": "Which queue should handle this ticket?",  # noqa: E731
                            "criteria": {n: None for n in names}}
    req = lambda state, qs: {"model": "bench", "state": state, "questions": qs}  # noqa: E731
    return {
        "W1": req(s100, {"refund": noul}),
        "W2": req(s300, {"team": {"type": "choice", "instructions": "Which team should handle this ticket?",
                                  "criteria": team5}, "refund": noul, "urgency": score}),
        "W3": req(s300, {"queue": choice(AREAS)}),
        "W4": req(s300, {"queue": choice(names200)}),
        "W4-5": req(s300, {"queue": choice(names200[::40])}),
    }


def w5_requests(tok: Any, model: str, n: int) -> list[dict[str, Any]]:
    """W5's ``n`` requests: W2's three questions, each about a different ~300-token ticket.

    Request ``k``'s state is ``"Ticket #<k+1>."`` followed by the ticket sentences starting at
    sentence ``k mod 14``: all ``n`` states differ within their first tokens, so neither the
    cross-request prefix cache nor the batch's shared-prefix step can reuse one request's state
    for another (only the chat template before the state is shared, as for any two tickets).

    >>> class Tok:  # one token per word
    ...     def encode_plain(self, text): return text.split()
    >>> [r["state"][:24] for r in w5_requests(Tok(), "m", 2)]
    ['Ticket #1. Hi, I was bil', 'Ticket #2. Please refund']
    """
    w2 = workloads(tok)["W2"]
    return [{**w2, "model": model, "state": make_state(tok, 300, first=k, head=f"Ticket #{k + 1}.")}
            for k in range(n)]


# jevcompat 0.1.1's state (checks.TICKET), asked with its "choice-options" question below
JEV_TICKET = ("Hi, I was charged twice for my March invoice (order #4471) and the refund I was promised "
              "last week still hasn't arrived. I've emailed three times. Please fix this today or I will "
              "dispute the charge with my bank.")


def queue_choice(n: int, model: str = "bench") -> dict[str, Any]:
    """jevcompat's many-option request (its ``choice-options`` case, which asks 2, 26, 64, 128 and
    255 options in turn): ``Billing`` and ``Queue 001`` ... ``Queue {n-1:03d}``, each described, about
    jevcompat's ticket (n >= 3; jevcompat's 2-option request lists Billing and Technical instead).

    >>> q = queue_choice(4)["questions"]["queue"]["criteria"]; list(q)[:2], q["Queue 003"]
    (['Billing', 'Queue 001'], 'Tickets routed to queue 3')
    """
    options = {"Billing": "Payments, invoices, refunds",
               **{f"Queue {i:03d}": f"Tickets routed to queue {i}" for i in range(1, n)}}
    return {"model": model, "state": JEV_TICKET, "questions": {"queue": {
        "type": "choice", "instructions": "Which queue should this ticket go to?", "criteria": options}}}


def warm_request(request: dict[str, Any]) -> dict[str, Any]:
    """An earlier request about the same state with another question (what warms the cache)."""
    return {"model": "bench", "state": request["state"],
            "questions": {"seen": {"type": "noul", "instructions": "Is this state about a customer?"}}}
