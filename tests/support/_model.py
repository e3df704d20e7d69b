"""A scripted OpenAI-compatible model server on 127.0.0.1, for harness tests.

It answers from a script of turns (:class:`Call`: run a shell command through the harness's own
tool; :class:`Read`: read a file through its own file tool; :class:`Edit`: a file's whole text in
aider's edit format, which uses no tool calls; :class:`Say`: a final message), one per model
call, in two dialects:

- ``POST /v1/chat/completions`` as vLLM answers it when the capture proxy asks for tokens
  (``return_token_ids``, ``logprobs``): ``prompt_token_ids`` at the top level, each choice's
  ``token_ids`` and ``logprobs.content`` aligned with them (``token_id:N`` tokens). The ids are
  the bytes of a plain rendering of the messages, so a turn's prompt extends the last one's. A
  request that streams (a harness calling it with no proxy between) gets the same message as
  server-sent chunks;
- ``POST /v1/responses``, the Responses API (Codex CLI speaks only this), as server-sent events
  when the request streams, else one JSON response.

``mode`` makes it misbehave: ``"hang"`` accepts each request and never answers, ``"crash"``
answers 500. Every request body is kept (:attr:`ScriptedModel.requests`), and the token ids of
each chat answer to them (:attr:`ScriptedModel.sent`), and every request's headers
(:attr:`ScriptedModel.headers`). :func:`capture_proxy`
serves OpenEnv's capture proxy in front of it, as a rollout would.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from _scripted_model import SUBMIT, is_terminus, terminus_answer

# The tool each harness offers for a shell command, and how its arguments carry the command.
SHELL_TOOLS = {
    "exec_command": lambda command: {"cmd": command},  # Codex CLI (unified exec)
    "shell": lambda command: {"command": ["bash", "-lc", command]},  # older Codex CLI
    "shell_command": lambda command: {"command": command},
    "bash": lambda command: {"command": command},
    "Bash": lambda command: {"command": command},  # Claude Code
    "exec": lambda command: {"command": command},
    "run_shell_command": lambda command: {"command": command},  # gemini-cli, qwen-code
}


@dataclass(frozen=True)
class Call:
    """A turn that runs ``command`` through the harness's shell tool."""

    command: str


@dataclass(frozen=True)
class Read:
    """A turn that reads the file at ``path`` through the harness's own file-reading tool, not
    its shell: what a command wrote there reaches the model even where the shell tool can lose a
    command's output (qwen-code 0.24.4's one-shot shell settles on the child's exit, before its
    stdout has drained)."""

    path: str


@dataclass(frozen=True)
class Say:
    """A turn that answers ``text`` and calls no tool: the harness's run ends."""

    text: str


@dataclass(frozen=True)
class Edit:
    """A turn that answers the whole new text of the file at ``path`` in aider's "whole" edit
    format (its path on a line, then the text in a fence): aider writes it."""

    path: str
    text: str

    def answer(self) -> str:
        return f"Writing {self.path}.\n\n{self.path}\n```\n{self.text}```\n"


Turn = Call | Read | Edit | Say
# How aider's system prompt starts (its "whole" edit format's, which a model it does not know
# gets): its turns offer no tools, as a side call's do.
AIDER_PROMPT = "Act as an expert software developer."


def is_aider(messages: list[dict[str, Any]]) -> bool:
    """Whether a request is aider's turn: its system prompt first."""
    content = messages[0].get("content") if messages else None
    return isinstance(content, str) and content.startswith(AIDER_PROMPT)


# The tool each harness offers for reading a file: Claude Code, gemini-cli and qwen-code, opencode.
READ_TOOLS = ("Read", "read_file", "read")


def _tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        if name:
            names.append(name)
    return names


def _shell_call(body: dict[str, Any], command: str) -> tuple[str, str]:
    """The tool name and JSON arguments that run ``command`` with the tools ``body`` offers."""
    offered = _tool_names(body)
    for name, arguments in SHELL_TOOLS.items():
        if name in offered:
            return name, json.dumps(arguments(command))
    raise AssertionError(f"no shell tool among {offered}")


def _read_call(body: dict[str, Any], path: str) -> tuple[str, str]:
    """The tool name and JSON arguments that read ``path`` with the tools ``body`` offers: the
    tool's one required argument that names a path (file_path, absolute_path, filePath)."""
    for tool in body.get("tools") or []:
        spec = tool.get("function") or tool
        if spec.get("name") in READ_TOOLS:
            schema = spec.get("parameters") or spec.get("input_schema") or {}
            (argument,) = [name for name in schema.get("required", []) if "path" in name.lower()]
            return spec["name"], json.dumps({argument: path})
    raise AssertionError(f"no file-reading tool among {_tool_names(body)}")


def _tool_call(body: dict[str, Any], turn: Call | Read) -> tuple[str, str]:
    if isinstance(turn, Call):
        return _shell_call(body, turn.command)
    return _read_call(body, turn.path)


def _ids(text: str) -> list[int]:
    return list(text.encode())


class ScriptedModel:
    """The server: ``with ScriptedModel([...]) as model:``, then ``model.base_url``."""

    def __init__(self, turns: list[Turn], *, mode: str = "answer", model: str = "scripted"):
        self.turns = list(turns)
        self.mode = mode
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.sent: list[dict[str, list[int]]] = []  # prompt_token_ids, completion_token_ids
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ScriptedModel:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any]) -> Turn:
        """The script's next turn. A chat request that does not start with a system message is
        the capture proxy's probe of the endpoint: answered (a shell call if it offers a tool),
        never taking a turn, not kept. One that offers no tool is a harness's side call (opencode
        titles its session so): answered, kept in :attr:`sent` only. terminus-2's turns (its
        prompt a user message, no tools) and aider's (its system prompt, no tools) take the
        script's turns as a system-led one with tools does."""
        messages = body.get("messages")
        aider = messages is not None and is_aider(messages)
        if messages is not None and not aider and not is_terminus(messages, body.get("tools")):
            if messages[0].get("role") != "system":
                return Call("ls /tmp") if _tool_names(body) else Say("ok")
            if not _tool_names(body):
                return Say("A title")
        with self._lock:
            self.requests.append(body)
            return self.turns.pop(0) if self.turns else Say("Done.")

    # -- the dialects --------------------------------------------------------------------------

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """A vLLM chat completion with token ids and logprobs."""
        terminus = is_terminus(body["messages"], body.get("tools"))
        turn = self._next(body)
        prompt = "".join(json.dumps(message, sort_keys=True) for message in body["messages"])
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if terminus:  # its JSON: a Call's keystrokes, or (any other turn) the task done
            message["content"] = terminus_answer(turn.command if isinstance(turn, Call) else SUBMIT)
            finish = "stop"
        elif isinstance(turn, Edit):
            message["content"] = turn.answer()
            finish = "stop"
        elif isinstance(turn, Call | Read):
            name, arguments = _tool_call(body, turn)
            call_id = f"call_{len(self.requests)}"
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ]
            finish = "tool_calls"
        else:
            message["content"] = turn.text
            finish = "stop"
        completion = _ids(json.dumps(message, sort_keys=True))
        if terminus or body["messages"][0].get("role") == "system":  # a turn, not a probe
            with self._lock:
                self.sent.append(
                    {"prompt_token_ids": _ids(prompt), "completion_token_ids": completion}
                )
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "prompt_token_ids": _ids(prompt),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish,
                    "token_ids": completion,
                    "logprobs": {
                        "content": [
                            {
                                "token": f"token_id:{i}",
                                "logprob": -0.5,
                                "bytes": [i],
                                "top_logprobs": [],
                            }
                            for i in completion
                        ]
                    },
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(completion),
                "total_tokens": len(prompt) + len(completion),
            },
        }

    def responses(self, body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """A Responses API answer: the response and the output items it carries."""
        turn = self._next(body)
        number = len(self.requests)
        if isinstance(turn, Call | Read):
            name, arguments = _tool_call(body, turn)
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_{number}",
                "call_id": f"call_{number}",
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }
        else:
            item = {
                "type": "message",
                "id": f"msg_{number}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        response = {
            "id": f"resp_{number}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": self.model,
            "output": [item],
            "usage": {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 15,
            },
        }
        return response, [item]

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # /v1/models
                self._json(
                    200, {"object": "list", "data": [{"id": model.model, "object": "model"}]}
                )

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with model._lock:
                    model.headers.append({k.lower(): v for k, v in self.headers.items()})
                if model.mode == "hang":
                    model._next(body)
                    model._stop.wait()
                    return
                if model.mode == "crash":
                    model._next(body)
                    self._json(500, {"error": {"message": "the scripted model crashed"}})
                    return
                if self.path.endswith("/chat/completions"):
                    completion = model.chat(body)
                    if body.get("stream"):
                        usage = (body.get("stream_options") or {}).get("include_usage")
                        self._chunks(completion, usage=bool(usage))
                    else:
                        self._json(200, completion)
                elif self.path.endswith("/responses"):
                    response, items = model.responses(body)
                    if body.get("stream"):
                        self._events(response, items)
                    else:
                        self._json(200, response)
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _chunks(self, completion: dict[str, Any], *, usage: bool) -> None:
                """A chat completion streamed as vLLM streams it: the message in one delta,
                the finish reason in the next, the usage after (when asked), then [DONE]."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                choice = completion["choices"][0]
                message = {k: v for k, v in choice["message"].items() if v is not None}
                calls = [
                    {"index": i, **call} for i, call in enumerate(message.get("tool_calls", []))
                ]
                if calls:
                    message["tool_calls"] = calls
                head = {k: completion[k] for k in ("id", "created", "model")}
                head["object"] = "chat.completion.chunk"
                chunks = [
                    {**head, "choices": [{"index": 0, "delta": message, "finish_reason": None}]},
                    {
                        **head,
                        "choices": [
                            {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
                        ],
                    },
                ]
                if usage:
                    chunks.append({**head, "choices": [], "usage": completion["usage"]})
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _events(self, response: dict[str, Any], items: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                started = {**response, "status": "in_progress", "output": []}
                events = [{"type": "response.created", "response": started}]
                for index, item in enumerate(items):
                    events.append(
                        {"type": "response.output_item.added", "output_index": index, "item": item}
                    )
                    events.append(
                        {"type": "response.output_item.done", "output_index": index, "item": item}
                    )
                events.append({"type": "response.completed", "response": response})
                for event in events:
                    self.wfile.write(
                        f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
                    )
                self.wfile.flush()

        return Handler


@contextlib.contextmanager
def capture_proxy(model: ScriptedModel, **options: Any) -> Iterator[tuple[str, Any]]:
    """OpenEnv's capture proxy (``openenv.core.harness.capture``) on 127.0.0.1 in front of
    ``model``: its base URL and its session registry (a session's id is its API key);
    ``options`` go to its ``create_app`` (``require_registered=False``: any key is served)."""
    import uvicorn
    from openenv.core.harness.capture.server import create_app

    app = create_app(llm_url=f"http://127.0.0.1:{model.port}", model=model.model, **options)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the capture proxy did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/v1", app.state.registry
    finally:
        server.should_exit = True
        thread.join(timeout=10)
