"""LangChain runs at once under ``RelayCallbackHandler`` (a thousand tasks; batches on threads): every run's model
calls nest under its own scope, every scope ends, and nothing is left followed."""

from __future__ import annotations

import asyncio
from typing import Any

from relay_runtime import conventions as cv
from tests.framework_support import need

runnables = need("langchain_core.runnables")
chat_models = need("langchain_core.language_models.chat_models")
messages = need("langchain_core.messages")
outputs = need("langchain_core.outputs")

from relay_runtime.integrations.langchain import RelayCallbackHandler, callbacks  # noqa: E402

RUNS = 1000


class EchoModel(chat_models.BaseChatModel):  # type: ignore[misc,name-defined]
    """Answers with the last message's text, after a pause that lets the other tasks run."""

    @property
    def _llm_type(self) -> str:
        return "echo"

    def _generate(self, msgs: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        answer = messages.AIMessage(content=f"echo {msgs[-1].content}")
        return outputs.ChatResult(generations=[outputs.ChatGeneration(message=answer)])

    async def _agenerate(self, msgs: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        return self._generate(msgs)


def test_a_thousand_concurrent_chains_each_hold_their_own_model_calls(relay_turn, relay_events) -> None:
    model = EchoModel()
    handler = RelayCallbackHandler()

    async def step(text: str) -> str:
        inherited = await model.ainvoke(f"{text} a")  # LangChain's config: the run's child
        own = await model.ainvoke(f"{text} b", config={"callbacks": [handler]})  # no parent run: the scope set here
        return f"{inherited.content}|{own.content}"

    chain = runnables.RunnableLambda(step).with_config(run_name="ask")

    async def main() -> list[str]:
        return await asyncio.gather(*(chain.ainvoke(f"q{i}", config={"callbacks": [handler]}) for i in range(RUNS)))

    answers = asyncio.run(main())
    assert answers == [f"echo q{i} a|echo q{i} b" for i in range(RUNS)]
    assert_each_chain_holds_its_own_calls(relay_turn, relay_events, RUNS)


def test_chains_batched_on_threads_each_hold_their_own_model_calls(relay_turn, relay_events) -> None:
    """``batch`` runs each input on a thread of LangChain's pool (the context copied to it)."""
    model = EchoModel()
    handler = RelayCallbackHandler()

    def step(text: str) -> str:
        inherited = model.invoke(f"{text} a")
        own = model.invoke(f"{text} b", config={"callbacks": [handler]})
        return f"{inherited.content}|{own.content}"

    chain = runnables.RunnableLambda(step).with_config(run_name="ask")
    inputs = [f"q{i}" for i in range(200)]
    answers = chain.batch(inputs, config={"callbacks": [handler], "max_concurrency": 16})
    assert answers == [f"echo {text} a|echo {text} b" for text in inputs]
    assert_each_chain_holds_its_own_calls(relay_turn, relay_events, len(inputs))


def assert_each_chain_holds_its_own_calls(relay_turn: Any, relay_events: Any, runs: int) -> None:
    chains = {e.uuid: e for e in relay_events.starts(name="ask")}
    assert len(chains) == runs
    calls_by_chain: dict[str, list[str]] = {uuid: [] for uuid in chains}
    asked = {e.parent_uuid: e for e in relay_events.starts(relay_kind=cv.ATTEMPT)}
    for call in relay_events.starts(relay_kind=cv.LOGICAL_CALL):
        # Each call's attempt says what it was asked: the chain it nests under must be the one asked that.
        said = asked[call.uuid].input["content"]["messages"][-1].content  # the model's own messages, as sent
        calls_by_chain[call.parent_uuid].append(said)
    for uuid, said in calls_by_chain.items():
        text = chains[uuid].input
        assert sorted(said) == [f"{text} a", f"{text} b"], (text, said)
    ends = relay_events.ends()
    assert len([e for e in ends if e.name == "ask" and e.outcome == "success"]) == runs
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 2 * runs
    assert not callbacks._RUNS  # every run followed has left the registry
    relay, _turn = relay_turn
    assert not relay.diagnostics().get("subscriber_errors")
