"""llama.cpp's own OpenAI-compatible server from the prebuilt ``xllamacpp`` wheel, as a process.

The wheel carries llama.cpp's server (the same C++ as ``llama-server``) compiled for a portable x86-64 baseline
(AVX2/FMA/F16C, no AVX-512 and no AMX kernels), so it starts on every x86-64 CPU here and needs no compiler.
This module gives it ``llama-server``'s command line (the options ``llm_server.LocalServer`` passes), so both
backends are started, watched and stopped the same way::

    python -m rerankeval.llm.xllama_server -m model.gguf --host 127.0.0.1 --port 8080 -c 8192 -np 1 --threads 2

It serves until SIGTERM/SIGINT. ``--no-repack`` turns off llama.cpp's extra (repacked) weight buffers, as
``llama-server --no-repack`` does.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m rerankeval.llm.xllama_server", description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("-c", "--ctx-size", type=int, default=8192)
    ap.add_argument("-np", "--parallel", type=int, default=1)
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--alias", default=None)
    ap.add_argument("--no-webui", action="store_true")
    ap.add_argument("--metrics", action="store_true")
    ap.add_argument("--no-repack", action="store_true")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = args.model
    p.hostnames = [args.host]
    p.port = args.port
    p.n_ctx = args.ctx_size
    p.n_parallel = args.parallel
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    if args.alias:
        p.model_alias = {args.alias}
    p.ui = not args.no_webui
    p.endpoint_metrics = args.metrics
    p.no_extra_bufts = args.no_repack
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xlc.Server(p)  # starts the HTTP server in a background thread
    print(f"xllamacpp {xlc.__version__} listening at {server.listening_address}", file=sys.stderr, flush=True)
    stop.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
