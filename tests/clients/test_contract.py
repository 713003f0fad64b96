"""Every chat client against the client contract: scripted, both OpenAI wire formats, Anthropic.

The OpenAI clients talk to a fake server behind ``httpx.MockTransport`` that writes each
``ModelAnswer`` in its wire format: a whole JSON answer, or an event stream whose text arrives in
small pieces and whose call arguments arrive in fragments, as real servers send them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import httpx
import pytest

from agentledger.adapters.chat.anthropic import AnthropicClient
from agentledger.adapters.chat.openai import (
    OpenAIChatClient,
    OpenAIError,
    OpenAIResponsesClient,
)
from agentledger.adapters.chat.scripted import ScriptedChatClient, ScriptExhausted
from agentledger.clients import BaseChatClient, ChatResponse
from agentledger.core.messages import Message
from agentledger.testing.clients import (
    ChatClientContract,
    FunctionCall,
    ModelAnswer,
)

TAG = "X-Contract-Tag"


def _pieces(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(events: Sequence[dict[str, Any] | str], *, named: bool = False) -> httpx.Response:
    def frame(event: dict[str, Any] | str) -> str:
        data = event if isinstance(event, str) else json.dumps(event)
        name = f"event: {event['type']}\n" if named and not isinstance(event, str) else ""
        return f"{name}data: {data}\n\n"

    body = "".join(frame(e) for e in events).encode()
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


class TestScripted(ChatClientContract):
    error_type = ScriptExhausted

    def open_client(self, answers: Sequence[ModelAnswer]) -> BaseChatClient:
        self.client = ScriptedChatClient([self._response(a) for a in answers])
        return self.client

    def _response(self, answer: ModelAnswer) -> ChatResponse:
        # A model other than the client's default: a stream must report the answer's own model.
        message = Message("assistant", answer.contents)
        return ChatResponse(
            message, model="scripted-answer", usage=answer.usage, finish_reason=answer.finish_reason
        )

    def failing_client(self) -> BaseChatClient:
        return ScriptedChatClient([])

    def tagged_kwargs(self, tag: str) -> dict[str, Any]:
        return {"tag": tag, "nested": {"keep": [1, 2]}}

    def seen_tags(self) -> list[str | None]:
        return [request.client_kwargs.get("tag") for request in self.client.requests]


class _FakeServer(ChatClientContract):
    """An OpenAI-compatible server behind MockTransport; subclasses write the wire format."""

    error_type = OpenAIError
    client_type: ClassVar[type[OpenAIChatClient | OpenAIResponsesClient | AnthropicClient]]

    def open_client(self, answers: Sequence[ModelAnswer]) -> BaseChatClient:
        pending = list(answers)
        self.requests: list[httpx.Request] = []

        def serve(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            body = json.loads(request.content)
            answer = pending.pop(0)
            return self.streamed(answer) if body.get("stream") else self.whole(answer)

        return self._client(serve)

    def failing_client(self) -> BaseChatClient:
        error = {"error": {"message": "Unknown model.", "type": "invalid_request_error", "code": "x"}}
        return self._client(lambda request: httpx.Response(404, json=error))

    def _client(self, serve: Any) -> BaseChatClient:
        http = httpx.AsyncClient(transport=httpx.MockTransport(serve))
        return self.client_type(
            "gpt-test", api_key="sk-test", base_url="http://llm.test/v1", http_client=http
        )

    def tagged_kwargs(self, tag: str) -> dict[str, Any]:
        return {"headers": {TAG: tag}}

    def seen_tags(self) -> list[str | None]:
        return [request.headers.get(TAG) for request in self.requests]

    def whole(self, answer: ModelAnswer) -> httpx.Response:
        raise NotImplementedError

    def streamed(self, answer: ModelAnswer) -> httpx.Response:
        raise NotImplementedError


class TestOpenAIChat(_FakeServer):
    client_type = OpenAIChatClient

    def whole(self, answer: ModelAnswer) -> httpx.Response:
        message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
        if answer.calls:
            message["tool_calls"] = [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in answer.calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": answer.finish_reason}
        return httpx.Response(200, json={**self._head(), "choices": [choice], "usage": self._usage(answer)})

    def streamed(self, answer: ModelAnswer) -> httpx.Response:
        chunks: list[dict[str, Any] | str] = [self._chunk({"role": "assistant", "content": ""})]
        chunks += [self._chunk({"content": piece}) for piece in _pieces(answer.text) if piece]
        for index, call in enumerate(answer.calls):
            start = {"index": index, "id": call.call_id, "type": "function", "function": {"name": call.name}}
            chunks.append(self._chunk({"tool_calls": [start]}))
            for piece in _pieces(call.arguments, 7):
                chunks.append(
                    self._chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        chunks.append(self._chunk({}, answer.finish_reason))
        chunks += [{**self._head(), "choices": [], "usage": self._usage(answer)}, "[DONE]"]
        return _sse(chunks)

    def _head(self) -> dict[str, Any]:
        return {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test-2024"}

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**self._head(), "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def _usage(self, answer: ModelAnswer) -> dict[str, int]:
        usage = answer.usage
        return {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
        }


class TestOpenAIResponses(_FakeServer):
    client_type = OpenAIResponsesClient

    def whole(self, answer: ModelAnswer) -> httpx.Response:
        return httpx.Response(200, json=self._response(answer))

    def streamed(self, answer: ModelAnswer) -> httpx.Response:
        head = {"id": "resp_1", "model": "gpt-test-2024", "status": "in_progress"}
        events: list[dict[str, Any] | str] = [{"type": "response.created", "response": head}]
        for piece in _pieces(answer.text) if answer.text else ():
            events.append({"type": "response.output_text.delta", "output_index": 0, "delta": piece})
        for index, call in enumerate(answer.calls, start=1):
            item = {**self._call(call), "arguments": "", "status": "in_progress"}
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
            for piece in _pieces(call.arguments, 7):
                delta = {"item_id": item["id"], "output_index": index, "delta": piece}
                events.append({"type": "response.function_call_arguments.delta", **delta})
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": self._call(call)}
            )
        events.append({"type": "response.completed", "response": self._response(answer)})
        return _sse(events, named=True)

    def _response(self, answer: ModelAnswer) -> dict[str, Any]:
        output = [self._call(call) for call in answer.calls]
        if answer.text:
            text = {"type": "output_text", "text": answer.text, "annotations": []}
            output.insert(0, {"type": "message", "id": "msg_1", "role": "assistant", "content": [text]})
        usage = answer.usage
        return {
            "id": "resp_1",
            "object": "response",
            "model": "gpt-test-2024",
            "status": "completed",
            "output": output,
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "total_tokens": usage.total_tokens,
            },
        }

    def _call(self, call: FunctionCall) -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": f"fc_{call.call_id}",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        }


class TestAnthropic(_FakeServer):
    """The Messages API: a whole message writes each call's ``input`` as the model's raw JSON text;
    a stream sends it in ``input_json_delta`` pieces, with the usage split between
    ``message_start`` and ``message_delta``."""

    client_type = AnthropicClient

    def whole(self, answer: ModelAnswer) -> httpx.Response:
        blocks = [json.dumps({"type": "text", "text": answer.text})] if answer.text else []
        for call in answer.calls:
            use = json.dumps({"type": "tool_use", "id": call.call_id, "name": call.name})
            blocks.append(use[:-1] + ', "input": ' + call.arguments + "}")
        stop = "tool_use" if answer.calls else "end_turn"
        head = {**self._head(), "stop_reason": stop, "usage": self._usage(answer)}
        body = json.dumps(head)[:-1] + ', "content": [' + ", ".join(blocks) + "]}"
        return httpx.Response(200, headers={"content-type": "application/json"}, content=body.encode())

    def streamed(self, answer: ModelAnswer) -> httpx.Response:
        usage = self._usage(answer)
        start = {**self._head(), "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        events: list[dict[str, Any] | str] = [{"type": "message_start", "message": start}]
        index = 0
        if answer.text:
            block: dict[str, Any] = {"type": "text", "text": ""}
            events.append({"type": "content_block_start", "index": 0, "content_block": block})
            for piece in _pieces(answer.text):
                delta = {"type": "text_delta", "text": piece}
                events.append({"type": "content_block_delta", "index": 0, "delta": delta})
            events.append({"type": "content_block_stop", "index": 0})
            index = 1
        for offset, call in enumerate(answer.calls, start=index):
            block = {"type": "tool_use", "id": call.call_id, "name": call.name, "input": {}}
            events.append({"type": "content_block_start", "index": offset, "content_block": block})
            events.append({"type": "ping"})
            for piece in _pieces(call.arguments, 7):
                delta = {"type": "input_json_delta", "partial_json": piece}
                events.append({"type": "content_block_delta", "index": offset, "delta": delta})
            events.append({"type": "content_block_stop", "index": offset})
        stop = "tool_use" if answer.calls else "end_turn"
        final = {"output_tokens": usage["output_tokens"]}
        events.append({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": final})
        events.append({"type": "message_stop"})
        return _sse(events, named=True)

    def _head(self) -> dict[str, Any]:
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-2025"}

    def _usage(self, answer: ModelAnswer) -> dict[str, int]:
        return {"input_tokens": answer.usage.input_tokens, "output_tokens": answer.usage.output_tokens}


@pytest.mark.parametrize("module", ["agentledger.testing.clients", "agentledger.testing.stores"])
def test_contracts_need_pytest_and_say_so(module: str) -> None:
    """agentledger.testing imports without pytest; its contract modules name what they need."""
    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "import agentledger.testing\n"
        f"try:\n    import {module}\nexcept ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"{module} needs pytest: pip install pytest"
