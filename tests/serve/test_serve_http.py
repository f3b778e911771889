#!/usr/bin/env python3
"""engram-cli serve (issue 19) as curl meets it, on the bundled model.

Usage: test_serve_http.py ENGRAM_CLI MODEL_DIR

Starts `engram-cli serve --port 0` on a fresh profile and checks with curl: the model list, a
completion (text, usage), the same completion streamed (chunks concatenate to the same text,
the same usage), stop strings, a stored conversation that continues (its rows grow in the
profile, and after a restart it is restored from the store), a streamed request whose client
leaves (the generation stops and the conversation is left as it was), two requests at once, and
the errors: bad JSON and bad parameters 400, unknown model and URL 404, wrong method 405, a body
over the limit 413, all in OpenAI's error shape.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

CLI, MODEL_DIR = sys.argv[1], sys.argv[2]
MODEL = os.path.basename(os.path.normpath(MODEL_DIR))
failures = []


def check(condition, what, detail=""):
    print(("ok   " if condition else "FAIL ") + what + (f": {detail}" if detail and not condition else ""))
    if not condition:
        failures.append(what)
    return condition


class Server:
    def __init__(self, profile, log_path, *extra):
        self.log_path = log_path
        self.log = open(log_path, "a")
        self.process = subprocess.Popen(
            [CLI, "serve", "--model", MODEL_DIR, "--port", "0", "--profile", profile, *extra],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.process.stdout.readline()  # "serving engram-tiny at http://127.0.0.1:P/v1"
        found = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        if not found:
            self.process.wait(timeout=60)
            sys.exit(f"the server did not start ({line!r}); its log:\n" + self.log_text())
        self.url = f"http://127.0.0.1:{found.group(1)}"

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        rc = self.process.wait(timeout=60)
        self.log.close()
        return rc


def curl(server, method, path, body=None, headers=(), stream=False):
    """(status, body bytes, response headers text)"""
    with tempfile.NamedTemporaryFile() as header_file:
        args = ["curl", "-sS", "-X", method, "-D", header_file.name, "-w", "\n%{http_code}",
                server.url + path]
        if stream:
            args.insert(1, "-N")
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            args += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
        for h in headers:
            args += ["-H", h]
        r = subprocess.run(args, input=data, capture_output=True, timeout=300)
        text, _, code = r.stdout.rpartition(b"\n")
        with open(header_file.name) as f:
            return int(code or 0), text, f.read()


def completion(server, body, stream=False):
    status, text, headers = curl(server, "POST", "/v1/chat/completions", body, stream=stream)
    return status, text, headers


def sse_events(text):
    events = [line[len("data: "):] for line in text.decode().split("\n\n") if line.strip()]
    return events


def leave_mid_stream(server, body):
    """Sends a streamed request and reads its first event, then closes the connection."""
    host, port = server.url[len("http://"):].split(":")
    data = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + host.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " +
                  str(len(data)).encode() + b"\r\n\r\n" + data)
        received = b""
        while b"data: " not in received:
            chunk = s.recv(4096)
            if not chunk:
                break
            received += chunk


def wait_for_log(log_path, offset, pattern, timeout=60):
    """The first line matching `pattern` that the server logs after `offset`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(log_path) as f:
            found = re.search(pattern, f.read()[offset:])
        if found:
            return found.group(0)
        time.sleep(0.1)
    return None


def is_openai_error(text, status_type="invalid_request_error"):
    try:
        error = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return (set(error) == {"message", "type", "param", "code"} and error["message"]
            and error["type"] == status_type)


def error_of(text):
    return json.loads(text)["error"]


def stored_messages(profile, name):
    """The conversation's messages as `export chat` reads them (read-only, beside the server)."""
    r = subprocess.run([CLI, "export", "chat", "--profile", profile, "--conversation", name,
                        "--format", "json", "--out", "-"], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)["conversations"][0]["messages"]


def main():
    work = tempfile.mkdtemp(prefix="engram-serve-")
    profile = os.path.join(work, "profile")
    log_path = os.path.join(work, "server.log")
    server = Server(profile, log_path)
    try:
        run_checks(server, profile, log_path)
    finally:
        if server.process.poll() is None:
            server.stop()
    if failures:
        print(f"\n{len(failures)} check(s) failed; server log {log_path}:\n" + open(log_path).read())
        sys.exit(1)
    shutil.rmtree(work)
    print("all checks passed")


def run_checks(server, profile, log_path):
    # /v1/models
    status, text, _ = curl(server, "GET", "/v1/models")
    models = json.loads(text) if status == 200 else {}
    check(status == 200 and models.get("object") == "list"
          and [m["id"] for m in models.get("data", [])] == [MODEL], "GET /v1/models lists " + MODEL,
          text)
    status, text, _ = curl(server, "GET", "/v1/models/" + MODEL)
    check(status == 200 and json.loads(text)["id"] == MODEL, "GET /v1/models/{id}", text)
    status, text, _ = curl(server, "GET", "/v1/models/gpt-4o")
    check(status == 404 and is_openai_error(text) and error_of(text)["code"] == "model_not_found",
          "GET /v1/models/{unknown}: 404 model_not_found", text)

    # One completion, then the same streamed.
    request = {"model": MODEL, "temperature": 0, "max_tokens": 40,
               "messages": [{"role": "system", "content": "You are a helpful assistant."},
                            {"role": "user", "content": "Hello! Where should I travel in spring?"}]}
    status, text, headers = completion(server, request)
    check(status == 200 and "application/json" in headers, "completion: 200 JSON", text)
    answer = json.loads(text)
    content = answer["choices"][0]["message"]["content"]
    usage = answer["usage"]
    finish = answer["choices"][0]["finish_reason"]
    check(answer["object"] == "chat.completion" and answer["model"] == MODEL
          and answer["id"].startswith("chatcmpl-"), "completion: object, model, id", text)
    check(answer["choices"][0]["message"]["role"] == "assistant" and content.strip() != "",
          "completion: non-empty assistant content", text)
    check(finish in ("stop", "length"), "completion: finish_reason", finish)
    check(usage["prompt_tokens"] > 10 and 1 <= usage["completion_tokens"] <= 40
          and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
          and (finish != "length" or usage["completion_tokens"] == 40),
          "completion: usage adds up (length stop = max_tokens)", json.dumps(usage))
    status, again, _ = completion(server, request)
    check(status == 200 and json.loads(again)["choices"][0]["message"]["content"] == content
          and json.loads(again)["usage"] == usage,
          "completion: greedy repeats with the same text and usage (cached prefix reused)", again)
    longer = dict(request, messages=request["messages"] + [
        {"role": "assistant", "content": content},
        {"role": "user", "content": "And in autumn?"}])
    status, text, _ = completion(server, longer)
    check(status == 200 and json.loads(text)["usage"]["prompt_tokens"]
          > usage["prompt_tokens"] + len(content) // 8,
          "completion: a longer history counts more prompt tokens", text)

    status, text, headers = completion(server, dict(request, stream=True,
                                                    stream_options={"include_usage": True}),
                                       stream=True)
    events = sse_events(text)
    check(status == 200 and "text/event-stream" in headers, "stream: 200 event-stream", headers)
    check(events and events[-1] == "[DONE]", "stream: ends with data: [DONE]", text[-200:])
    chunks = [json.loads(e) for e in events[:-1]]
    check(all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks),
          "stream: chunks share one id")
    check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "stream: first chunk role")
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    check(streamed == content, "stream: chunks concatenate to the non-streamed text",
          f"{streamed!r} vs {content!r}")
    check(len([c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]) > 1,
          "stream: the text arrives in several chunks")
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    check(len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == finish,
          "stream: one final chunk with the finish_reason")
    check(chunks[-1]["choices"] == [] and chunks[-1]["usage"] == usage,
          "stream: include_usage sends the same usage last", json.dumps(chunks[-1]))

    # Stop strings cut the text where it would first appear.
    middle = len(content) // 2
    stop = content[middle:middle + 4]
    status, text, _ = completion(server, dict(request, stop=[stop, "\u2603never"]))
    cut = json.loads(text)["choices"][0] if status == 200 else {}
    check(status == 200 and cut["message"]["content"] == content[:content.find(stop)]
          and cut["finish_reason"] == "stop", f"stop {stop!r}: text before it, finish stop", text)

    # A stored conversation continues with its memory.
    name = "spring-trip"
    first = {"model": MODEL, "temperature": 0, "max_tokens": 24, "engram_conversation": name,
             "messages": [{"role": "user", "content": "My name is Ada and I like the sea."}]}
    status, text, _ = completion(server, first)
    turn1 = json.loads(text)
    check(status == 200 and turn1.get("engram_conversation") == name,
          "conversation: first turn answered, the name echoed", text)
    stored = stored_messages(profile, name)
    check(stored is not None and [m["role"] for m in stored] == ["user", "assistant"]
          and stored[0]["text"] == first["messages"][0]["content"]
          and stored[1]["text"] == turn1["choices"][0]["message"]["content"],
          "conversation: the profile stores the turn", json.dumps(stored))
    second = dict(first, messages=[{"role": "user", "content": "What is my name?"}])
    status, text, _ = completion(server, second)
    turn2 = json.loads(text)
    check(status == 200 and turn2["usage"]["prompt_tokens"]
          > turn1["usage"]["prompt_tokens"] + turn1["usage"]["completion_tokens"] - 2,
          "conversation: the second turn's prompt holds the first turn", text)
    stored = stored_messages(profile, name)
    check(stored is not None and len(stored) == 4 and stored[2]["text"] == "What is my name?",
          "conversation: the stored conversation grows to 4 messages", json.dumps(stored))
    # A client that resends the whole history (as chat UIs do) adds only its new message.
    history = [{"role": m["role"], "content": m["text"]} for m in stored]
    third = dict(first, messages=history + [{"role": "user", "content": "Thanks!"}],
                 stream=True)
    status, text, _ = completion(server, third, stream=True)
    streamed3 = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                        for e in sse_events(text)[:-1])
    stored = stored_messages(profile, name)
    check(status == 200 and stored is not None and len(stored) == 6
          and stored[5]["text"] == streamed3,
          "conversation: a resent history is not stored twice; a streamed reply is saved",
          json.dumps(stored))
    check(re.search(r"completion \(conversation 'spring-trip'\): \d+ prompt tokens \([1-9]\d* reused",
                    open(log_path).read()) is not None,
          "conversation: later turns reuse the session's KV (server log)")
    status, text, _ = completion(server, dict(first, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]))
    check(status == 400 and is_openai_error(text) and error_of(text)["param"] == "messages",
          "conversation: a system message after it began: 400", text)

    # A client that leaves mid-stream stops its generation (noticed at the next write, so a few
    # tokens in, where the same request read to its end has more); a stored conversation stays
    # as it was.
    story = [{"role": "user", "content": "Tell me a very long story."}]
    leave = {"model": MODEL, "messages": story, "temperature": 1.5, "max_tokens": 3000}
    for seed in range(1, 40):
        status, text, _ = completion(server, dict(leave, seed=seed))
        natural = json.loads(text)["usage"]["completion_tokens"] if status == 200 else 0
        if natural >= 20:
            break
    check(natural >= 20, "disconnect: a seed whose reply has 20 tokens or more", str(natural))
    log_before = len(open(log_path).read())
    leave_mid_stream(server, dict(leave, seed=seed, stream=True))
    line = wait_for_log(log_path, log_before, r"completion \(stateless\): .*")
    generated = re.search(r"(\d+) generated", line or "")
    check(line is not None and "cancelled" in line and generated
          and int(generated.group(1)) < natural,
          f"disconnect: the generation stops early ({generated.group(1) if generated else '?'} "
          f"generated; {natural} when read to the end)",
          line or "no log line")
    before = len(stored_messages(profile, name))
    log_before = len(open(log_path).read())
    leave_mid_stream(server, dict(first, messages=story, temperature=1.5, seed=seed,
                                  max_tokens=3000, stream=True))
    line = wait_for_log(log_path, log_before, r"completion \(conversation 'spring-trip'\): .*")
    check(line is not None and "cancelled" in line,
          "disconnect: a conversation's generation is cancelled too", line or "no log line")
    check(len(stored_messages(profile, name)) == before,
          "disconnect: the conversation is left as it was")

    # Two clients at once: the worker serialises them, both are answered.
    results = [None, None]

    def ask(i):
        results[i] = completion(server, request)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(all(r[0] == 200 and json.loads(r[1])["choices"][0]["message"]["content"] == content
              for r in results), "two requests at once: both answered, same text")

    # Errors, in OpenAI's shape.
    status, text, _ = completion(server, b'{"model": "' + MODEL.encode() + b'", "messages": [')
    check(status == 400 and is_openai_error(text), "bad JSON: 400", text)
    status, text, _ = completion(server, b"[1, 2]")
    check(status == 400 and is_openai_error(text), "a body that is not an object: 400", text)
    status, text, _ = completion(server, dict(request, model="gpt-4o"))
    check(status == 404 and is_openai_error(text) and error_of(text)["code"] == "model_not_found",
          "unknown model: 404 model_not_found", text)
    for bad, param in [({"messages": []}, "messages"), ({"temperature": 3}, "temperature"),
                       ({"n": 2}, "n"), ({"max_tokens": 0}, "max_tokens"),
                       ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
                       ({"messages": [{"role": "user", "content": [
                           {"type": "image_url", "image_url": {"url": "x"}}]}]},
                        "messages[0].content[0].type"),
                       ({"stop": [1]}, "stop"), ({"engram_conversation": ""}, "engram_conversation"),
                       ({"messages": [{"role": "user", "content": "a"},
                                      {"role": "assistant", "content": "b"}]}, "messages")]:
        status, text, _ = completion(server, dict(request, **bad))
        check(status == 400 and is_openai_error(text) and error_of(text)["param"] == param,
              f"{json.dumps(bad)[:60]}: 400 naming {param}", text)
    status, text, _ = completion(server, b'{"model": "' + MODEL.encode() + b'", "messages": ' +
                                 b"[" * 100000 + b"]" * 100000 + b"}")
    check(status == 400 and is_openai_error(text), "100,000 nested arrays: 400", text[:200])
    big = json.dumps(dict(request, messages=[{"role": "user", "content": "x" * (5 << 20)}])).encode()
    status, text, _ = completion(server, big)
    check(status == 413 and is_openai_error(text) and error_of(text)["code"] == "request_too_large",
          "a 5 MiB body: 413", text[:300])
    status, text, _ = curl(server, "POST", "/v1/chat/completions", big,
                           headers=["Transfer-Encoding: chunked"])
    check(status == 413 and is_openai_error(text) and error_of(text)["code"] == "request_too_large",
          "a 5 MiB chunked body (no Content-Length): 413", text[:300])
    status, text, headers = curl(server, "GET", "/v1/chat/completions")
    check(status == 405 and is_openai_error(text) and "Allow: POST" in headers,
          "GET /v1/chat/completions: 405, Allow: POST", text)
    status, text, _ = curl(server, "POST", "/v1/models", {})
    check(status == 405 and is_openai_error(text), "POST /v1/models: 405", text)
    status, text, _ = curl(server, "GET", "/v1/completions")
    check(status == 404 and is_openai_error(text) and error_of(text)["code"] == "unknown_url",
          "an unknown URL: 404", text)
    status, text, _ = curl(server, "POST", "/v1/chat/completions", request)
    check(status == 200, "the server still answers after the errors", text)

    # A port in use is an error, not a second server sharing it.
    port = server.url.rsplit(":", 1)[1]
    second = subprocess.run([CLI, "serve", "--model", MODEL_DIR, "--port", port, "--stateless"],
                            capture_output=True, text=True, timeout=120)
    check(second.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in second.stderr,
          "a second server on the same port fails", second.stderr[-300:])

    # A restart restores the conversation from the store and continues it.
    check(server.stop() == 0, "SIGTERM stops the server with exit code 0")
    restarted = Server(profile, log_path, "--sessions", "1")
    try:
        status, text, _ = completion(restarted, dict(first, messages=[
            {"role": "user", "content": "Do you remember me?"}]))
        stored = stored_messages(profile, name)
        check(status == 200 and stored is not None and len(stored) == 8,
              "restart: the conversation continues from the store (8 messages)", text)
        check(re.search(r"conversation 'spring-trip': restored 6 messages, [1-9]\d* cached tokens",
                        restarted.log_text()) is not None,
              "restart: its KV is restored, not recomputed (server log)")
        # With --sessions 1 another conversation pushes this one out of memory; it comes back
        # from the store with everything it had.
        status, _, _ = completion(restarted, dict(first, engram_conversation="other"))
        status2, text, _ = completion(restarted, dict(first, messages=[
            {"role": "user", "content": "Still there?"}]))
        stored = stored_messages(profile, name)
        check(status == 200 and status2 == 200 and stored is not None and len(stored) == 10
              and re.search(r"conversation 'spring-trip': restored 8 messages, [1-9]\d* cached",
                            restarted.log_text()) is not None,
              "--sessions 1: a conversation pushed out of memory is restored from the store", text)
    finally:
        restarted.stop()
    server.process = restarted.process

    # A prompt past the positions under a policy that keeps every token: a plain 400, streamed
    # or not (the stream has not begun when prefill fails).
    full = Server(profile, log_path, "--policy", "full")
    try:
        long = {"model": MODEL, "max_tokens": 5,
                "messages": [{"role": "user", "content": "hello there friend " * 2000}]}
        for stream in (False, True):
            status, text, _ = completion(full, dict(long, stream=stream), stream=stream)
            check(status == 400 and is_openai_error(text)
                  and error_of(text)["code"] == "context_length_exceeded",
                  f"policy full, 10,000-token prompt, stream={stream}: 400 "
                  "context_length_exceeded", text[:300])
    finally:
        full.stop()

    # A long conversation imported under epicache with a small budget: its first request clusters
    # it and builds one episode; while no request waits the server builds the others a block at a
    # time and saves them, so a restart restores every episode's cache.
    work = os.path.dirname(profile)
    long_profile, chat_file = os.path.join(work, "long-profile"), os.path.join(work, "long.json")
    topics = ["the garden and its roses", "the old bicycle in the shed",
              "the chess club on Tuesdays", "the recipe for plum cake"]
    messages = [{"role": "assistant" if i % 2 else "user",
                 "text": f"Note {i} is about {topics[(i // 8) % 4]}, which came up again today.",
                 "time_ms": 1_700_000_000_000 + i} for i in range(160)]
    with open(chat_file, "w") as f:
        json.dump({"format": "engram-conversations", "version": 1, "conversations": [
            {"title": "A long chat", "created_ms": 1, "updated_ms": 1, "memory_policy": "epicache",
             "kv_budget": 256, "messages": messages}]}, f)
    r = subprocess.run([CLI, "import", "chat", "--profile", long_profile, chat_file],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "a long conversation imported", r.stderr)
    ask = {"model": MODEL, "temperature": 0, "max_tokens": 8, "engram_conversation": "A long chat",
           "messages": [{"role": "user", "content": "What about the plum cake?"}]}
    long_server = Server(long_profile, log_path)
    try:
        log_before = len(open(log_path).read())
        status, text, _ = completion(long_server, ask)
        check(status == 200, "long conversation: answered", text)
        line = wait_for_log(log_path, log_before,
                            r"conversation 'A long chat': prepared between requests \(\d+ blocks\), "
                            r"saved with \d+ episode caches", timeout=300)
        caches = re.search(r"saved with (\d+) episode caches", line or "")
        check(caches is not None and int(caches.group(1)) >= 2,
              "long conversation: the other episodes built and saved while no request waits",
              line or "no log line")
    finally:
        long_server.stop()
    again = Server(long_profile, log_path)
    try:
        log_before = len(open(log_path).read())
        status, text, _ = completion(again, dict(ask, messages=[
            {"role": "user", "content": "And the chess club?"}]))
        restored = wait_for_log(log_path, log_before, r"conversation 'A long chat': restored .*")
        check(status == 200 and restored is not None
              and re.search(r"restored 162 messages, [1-9]\d* cached tokens", restored) is not None,
              "long conversation: a restart restores every episode's cache", restored or text)
    finally:
        again.stop()


if __name__ == "__main__":
    main()
