"""Prices of model calls from the ``genai-prices`` package (the ``prices`` extra).

``genai_price(model, usage, at)`` is a ``agentledger.cost.Price``: what one model call cost in
USD, looked up by the model the response names and the time of the call (prices change; the
table keeps their history), or None when the table does not know the model. Cached input tokens
are priced as cache reads and writes where the model has such prices; ``input_tokens`` counts
them too, as the table expects. Nothing here reaches the network: the table is the snapshot the
installed package ships.
"""

from __future__ import annotations

import datetime

from agentledger.core.messages import Usage

__all__ = ("available", "genai_price")


def available() -> bool:
    """Whether ``genai-prices`` is installed."""
    try:
        import genai_prices  # noqa: F401
    except ImportError:
        return False
    return True


def genai_price(model: str, usage: Usage, at: int) -> float | None:
    """The price of one call of ``model`` with ``usage`` at ``at`` (ns since the epoch), or None."""
    from genai_prices import Usage as PricedUsage
    from genai_prices import calc_price

    counts = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }
    when = datetime.datetime.fromtimestamp(at / 1e9, tz=datetime.UTC)
    try:
        priced = calc_price(PricedUsage(**counts), model, genai_request_timestamp=when)
    except LookupError:
        return None
    return float(priced.total_price)
