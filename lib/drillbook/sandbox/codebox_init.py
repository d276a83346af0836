"""The first process of a code sandbox: runs the session's code, one request at a time.

Started by the sandbox service (inside bubblewrap, or as a plain subprocess under the
no-isolation defect) with `python3 -I -S`, so it imports nothing but the standard library. It
prints `{"ready": true}`, then reads one JSON request a line on stdin ({"code", "timeout_s",
"language": "python" | "sh"}), runs it in the workspace (its working folder) and answers one JSON
line: exit code, stdout and stderr (each cut at OUTPUT_MAX), seconds, and whether it timed out.
Processes the code leaves behind keep running until the sandbox goes.
"""

import json
import os
import signal
import subprocess
import sys
import time

OUTPUT_MAX = 64 * 1024


def run(request):
    language = request.get("language", "python")
    code = str(request.get("code", ""))
    argv = [sys.executable, "-I", "-S", "-c", code] if language == "python" else ["/bin/sh", "-c", code]
    timeout = float(request.get("timeout_s", 30))
    started = time.monotonic()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timed_out = False
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        process.kill()
        out, err = process.communicate()
    return {"exit_code": process.returncode, "stdout": out[:OUTPUT_MAX].decode("utf-8", "replace"),
            "stderr": err[:OUTPUT_MAX].decode("utf-8", "replace"), "seconds": time.monotonic() - started,
            "timed_out": timed_out}


def main():
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    out = sys.stdout
    out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            answer = run(json.loads(line))
        except Exception as error:  # noqa: BLE001 - a request it cannot run is answered, not fatal
            answer = {"error": f"{type(error).__name__}: {error}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
