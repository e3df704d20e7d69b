"""The model endpoint contract of a harness rollout, as a toy server: it answers every chat
completion with "ok" in the shape the capture proxy reads from vLLM (non-streaming).

    python docs/examples/model_server.py 8001   # then: base_url="http://127.0.0.1:8001/v1"
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def tokenize(text: str) -> list[int]:  # a real engine's own tokenizer goes here
    return list(text.encode())


class Model(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # GET /v1/models: the served model ids
        self.reply({"object": "list", "data": [{"id": "my-model", "object": "model"}]})

    def do_POST(self) -> None:  # POST /v1/chat/completions
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = tokenize(json.dumps(body["messages"]) + json.dumps(body.get("tools")))
        completion = tokenize("ok")  # the sampled ids, whose text is message.content
        t = float(body.get("temperature") or 1.0) or 1.0  # logprobs after temperature
        content = [  # the proxy sends logprobs=true, top_logprobs=0 (and asks for more in probes)
            {"token": f"token_id:{i}", "logprob": -0.1 / t, "top_logprobs": [
                {"token": f"token_id:{i + k}", "logprob": -(0.1 + k) / t}
                for k in range(body.get("top_logprobs") or 0)]}
            for i in completion
        ]
        choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
        if body.get("return_token_ids"):  # the proxy sends return_token_ids=true
            choice["token_ids"] = completion
        if body.get("logprobs"):
            choice["logprobs"] = {"content": content}
        self.reply({
            "id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
            "prompt_token_ids": prompt if body.get("return_token_ids") else None,  # the top level
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion)},
        })

    def reply(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    HTTPServer(("127.0.0.1", int(sys.argv[1])), Model).serve_forever()
