"""The one test double of the rollout tests: the trainer's model, a scripted OpenAI-compatible
server on 127.0.0.1 that answers as vLLM does when the capture proxy asks (``return_token_ids``,
``logprobs``): ``prompt_token_ids`` at the top level, each choice's ``token_ids`` and its
``logprobs.content`` as ``token_id:N`` entries, processed (temperature-scaled) logprobs.

Its tokenizer is UTF-8 bytes of a fixed chat rendering, so turn k+1's prompt extends turn k's
prompt and completion exactly, as a real engine's does. Each model name is a script: the bash
command its k-th harness turn calls (k = the assistant messages in the request so far), through
the harness's bash tool, or as terminus-2's JSON keystrokes. A harness turn is a request that
starts with a system message or terminus-2's prompt; the capture proxy's probes are answered too
(text for a prompt without tools), but only harness turns are kept in :attr:`ScriptedModel.calls`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

CRASH = "<crash>"  # a script entry that answers HTTP 500 (the engine failed)
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini-swe-agent's end of task
# How Harbor's terminus-2 starts its prompt: one user message, no tools; it reads a JSON answer
# (keystrokes for its tmux pane, or task_complete, which it asks to confirm: SUBMIT twice).
TERMINUS_PROMPT = "You are an AI assistant tasked with solving command-line tasks"


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def decode(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _calls(message: dict[str, Any]) -> str:
    rendered = ""
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        try:
            arguments = json.dumps(json.loads(function.get("arguments") or "{}"), sort_keys=True)
        except ValueError:
            arguments = str(function.get("arguments"))
        rendered += f"<call>{function.get('name')} {arguments}</call>"
    return rendered


def _body(message: dict[str, Any]) -> str:
    return _text(message.get("content")) + _calls(message) + "<|end|>"


def is_terminus(messages: list[dict[str, Any]], tools: Any) -> bool:
    """Whether a request is terminus-2's turn: its prompt first, no tools."""
    content = messages[0].get("content") if messages else None
    return not tools and isinstance(content, str) and content.startswith(TERMINUS_PROMPT)


def terminus_answer(command: str) -> str:
    """terminus-2's JSON answer: ``command`` typed into its pane, or (SUBMIT) the task done."""
    if command == SUBMIT:
        return json.dumps({"analysis": "done", "plan": "", "commands": [], "task_complete": True})
    keys = [{"keystrokes": command + "\n", "duration": 1.0}]
    return json.dumps({"analysis": "", "plan": "", "commands": keys, "task_complete": False})


def render(messages: list[dict[str, Any]], tools: list[Any] | None) -> str:
    """The prompt as the engine tokenizes it: tools, each message, the generation prompt."""
    prompt = f"<tools>{json.dumps(tools, sort_keys=True)}</tools>" if tools else ""
    for message in messages:
        prompt += f"<|{message.get('role')}|>" + _body(message)
    return prompt + "<|assistant|>"


@dataclass
class ScriptedModel:
    """``scripts``: model name -> the bash commands of its harness turns, in order."""

    scripts: dict[str, list[str]]
    calls: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.app = FastAPI()
        self.app.get("/v1/models")(self._models)
        self.app.post("/v1/chat/completions")(self._complete)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def turns(self, model: str) -> list[dict[str, Any]]:
        with self._lock:
            return [call for call in self.calls if call["model"] == model]

    async def _models(self) -> dict[str, Any]:
        data = [{"id": name, "object": "model"} for name in self.scripts]
        return {"object": "list", "data": data}

    async def _complete(self, request: Request) -> Any:
        body = await request.json()
        model, messages = str(body.get("model")), body.get("messages") or []
        script = self.scripts.get(model)
        if script is None:
            return JSONResponse({"error": {"message": f"no model {model}"}}, status_code=404)
        terminus = is_terminus(messages, body.get("tools"))
        harness = terminus or (bool(messages) and messages[0].get("role") == "system")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        offered = body.get("tools") or terminus
        command = script[min(turn, len(script) - 1)] if offered else None
        if harness and command == CRASH:
            return JSONResponse({"error": {"message": "engine failure"}}, status_code=500)
        if terminus and command is not None:
            message = {"role": "assistant", "content": terminus_answer(command)}
        elif command is not None:
            arguments = json.dumps({"command": command})
            message = {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"call_{turn + 1}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": arguments},
                    }
                ],
            }
        else:
            message = {"role": "assistant", "content": "ok"}
        prompt = encode(render(messages, body.get("tools")))
        completion = encode(_body(message))
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        if isinstance(limit, int) and len(completion) > limit:
            completion, finish = completion[:limit], "length"
        temperature = float(body.get("temperature") or 1.0) or 1.0
        top = int(body.get("top_logprobs") or 0)
        entries = []
        for index, token in enumerate(completion):
            logprob = -(0.05 + 0.1 * (index % 5)) / temperature
            alternatives = [  # the runner-up k is 3k/T below: processed logprobs
                {"token": f"token_id:{(token + k) % 256}", "logprob": logprob - 3 * k / temperature}
                for k in range(top)
            ]
            entries.append(
                {"token": f"token_id:{token}", "logprob": logprob, "top_logprobs": alternatives}
            )
        if harness:
            with self._lock:
                self.headers.append(dict(request.headers))
                self.calls.append(
                    {
                        "model": model,
                        "turn": turn,
                        "prompt_token_ids": prompt,
                        "completion_token_ids": completion,
                        "logprobs": [entry["logprob"] for entry in entries],
                        "messages": messages,
                    }
                )
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "prompt_token_ids": prompt,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish,
                    "token_ids": completion,
                    "logprobs": {"content": entries} if body.get("logprobs") else None,
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(completion),
                "total_tokens": len(prompt) + len(completion),
            },
        }

    def __enter__(self) -> ScriptedModel:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning"))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline, "the scripted model did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
