"""Stands in for a script and Proton in tests/test_profile.py: an env-mode payload that
copies each capture it is given to where Proton would write it, $AORTA_PROTON_NAME.<ext>.

    python fake_proton.py [WORD ...]

Words: a .hatchet, .hatchet_msgpack or .chrome_trace file, copied (by rank 0 alone under a
launcher); a word ending in "fail", exit 7 at once; "env FILE", writes the AORTA_PROTON_* and device
variables it was given, and whether triton.profiler was imported before it ran, to FILE
as JSON; "read", prints "read: " and a line of stdin; "wait FILE SECONDS", writes its pid
to FILE, then waits SECONDS, or, from SIGINT, SIGTERM or SIGHUP on, half a second (as
Proton writing its capture does), then copies its captures, writes the signals it got
(all of them, each time) to FILE.ended and exits 130.
Exit status: 0, or as above.
"""

import sys

PRELOADED = "triton.profiler" in sys.modules  # before anything of this script's ran

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402


def wait(started, seconds):
    """The signals that ended the wait, after its pid was written to started. SIGINT is
    Python's own KeyboardInterrupt: were it ignored, as in a background job, none comes."""
    got = []
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: got.append(signal.Signals(signum).name))
    with open(started + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(started + ".tmp", started)  # whole when it appears
    until, ending = time.monotonic() + float(seconds), False
    while True:
        try:
            if time.monotonic() >= until:
                return got
            if got and not ending:  # ends after a while, as Proton writing its capture does
                until, ending = time.monotonic() + 0.5, True
            time.sleep(0.01)
        except KeyboardInterrupt:
            got.append("SIGINT")


def main():
    words, env = sys.argv[1:], os.environ
    if any(word.endswith("fail") for word in words):
        return 7
    if "env" in words:
        given = ("AORTA_", "CUDA_", "HIP_", "ROCR_")
        seen = {k: v for k, v in env.items() if k.startswith(given)}
        with open(words[words.index("env") + 1], "w") as f:
            json.dump({"env": seen, "preloaded": PRELOADED}, f)
    if "read" in words:
        print("read:", sys.stdin.readline().strip(), flush=True)
    got = wait(*words[words.index("wait") + 1 :][:2]) if "wait" in words else []
    if env.get("RANK", "0") == "0":
        ext = ".chrome_trace" if env["AORTA_PROTON_DATA"] == "trace" else ".hatchet"
        for capture in [word for word in words if word.endswith((".hatchet", ".chrome_trace"))]:
            shutil.copy(capture, env["AORTA_PROTON_NAME"] + ext)
        for capture in [word for word in words if word.endswith(".hatchet_msgpack")]:
            shutil.copy(capture, env["AORTA_PROTON_NAME"] + ".hatchet_msgpack")  # format=msgpack
    if got:
        with open(words[words.index("wait") + 1] + ".ended", "w") as f:
            f.write(" ".join(got))
        return 130
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)
