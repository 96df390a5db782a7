"""The decisions of the SDK's fixed samplers, worked out without asking them (``deferred.FastPath.start_span``).

Asking a sampler costs a call, a ``SamplingResult`` and, for a parent-based one, a context to find the parent
in; always-on and always-off samplers, and parent-based ones choosing between them, decide by the parent alone.
"""

from __future__ import annotations

from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, StaticSampler
from opentelemetry.trace import SpanContext, TraceFlags

from .span_tuples import FLAGS, IS_REMOTE

_SAMPLED_BIT = TraceFlags.SAMPLED
_PARENT_BASED = ParentBased.should_sample
_STATIC = StaticSampler.should_sample


def static_choice(sampler: Sampler, parent: SpanContext | None) -> Decision | None:
    """The decision of the SDK's fixed samplers (always on / off, and parent-based ones choosing
    one of them for this parent), which depends on nothing else; None for any other sampler."""
    try:
        if type(sampler).should_sample is _PARENT_BASED:
            # ParentBased.should_sample's choice of delegate.
            if parent is None:
                sampler = sampler._root  # type: ignore[attr-defined]
            elif parent[IS_REMOTE]:
                sampled = parent[FLAGS] & _SAMPLED_BIT
                sampler = sampler._remote_parent_sampled if sampled else sampler._remote_parent_not_sampled  # type: ignore[attr-defined]
            else:
                sampled = parent[FLAGS] & _SAMPLED_BIT
                sampler = sampler._local_parent_sampled if sampled else sampler._local_parent_not_sampled  # type: ignore[attr-defined]
        if type(sampler).should_sample is _STATIC:
            return sampler._decision  # type: ignore[attr-defined]
    except AttributeError:  # an SDK whose samplers changed shape: ask the sampler
        return None
    return None
