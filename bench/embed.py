"""The embedding stage's overhead: texts/s of ``rerankeval.index.embed`` vs a bare ``SentenceTransformer.encode``.

Same model object, same texts, same process: a bare ``encode`` (batch 32, normalised), then the stage's
``Embedder.encode`` into an empty temporary cache (hashing, cache lookup, shards written), then a second
bare ``encode`` (the better bare time is the reference), then the stage again on the filled cache (warm:
nothing encoded). The headline ``overhead_ratio`` is cold stage seconds / bare seconds (target <= 1.1).

    python bench/embed.py                    # 500 chunks of the default dataset (synthetic texts without it)
    python bench/embed.py --texts 2000 --dataset scifact

Writes ``results/bench/embed.json`` with the machine's load average (timings are upper bounds).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import ROOT, resolve_dataset
from rerankeval.core.settings import load_settings
from rerankeval.index import embed

WORDS = "package install system file configuration server network user kernel boot disk mount service log".split()


def sample_texts(dataset: str, n: int, seed: int = 0) -> tuple[list[str], str]:
    """``n`` chunk texts of the dataset's corpus (stage 01), else synthetic ones; and where they came from."""
    try:
        path = resolve_dataset(dataset, load_settings()).chunks
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    except (FileNotFoundError, ValueError):
        lines = []
    texts = [json.loads(ln)["text"] for ln in lines if ln.strip()]
    rng = random.Random(seed)
    if texts:
        return rng.sample(texts, min(n, len(texts))), f"{dataset} chunks"
    synth = [f"text {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 180))) for i in range(n)]
    return synth, "synthetic"


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="debian-manuals")
    ap.add_argument("--texts", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args(argv)

    texts, source = sample_texts(args.dataset, args.texts)
    model = embed.load_sentence_transformer(str(embed.bundled_model_path()))
    model.encode(texts[:32], batch_size=args.batch_size, show_progress_bar=False)  # warm-up (threads, allocator)

    def bare() -> None:
        model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True,
                     show_progress_bar=False)  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="bench-embed-") as tmp:
        stage = embed.Embedder(batch_size=args.batch_size, progress=False, cache_root=tmp, model_obj=model)
        bare_1 = timed(bare)
        cold = timed(lambda: stage.encode(texts))
        cold_encoded = stage.stats.encoded
        bare_2 = timed(bare)
        warm = timed(lambda: stage.encode(texts))
        warm_encoded = stage.stats.encoded
    bare_s = min(bare_1, bare_2)
    out = {
        "texts": len(texts),
        "source": source,
        "batch_size": args.batch_size,
        "loadavg": list(os.getloadavg()),
        "bare_s": [round(bare_1, 3), round(bare_2, 3)],
        "bare_texts_per_s": round(len(texts) / bare_s, 1),
        "stage_cold_s": round(cold, 3),
        "stage_cold_texts_per_s": round(len(texts) / cold, 1),
        "stage_cold_encoded": cold_encoded,
        "stage_warm_s": round(warm, 3),
        "stage_warm_encoded": warm_encoded,
        "overhead_ratio": round(cold / bare_s, 3),
    }
    path = atomic_write_json(ROOT / "results" / "bench" / "embed.json", out)
    print(
        f"{len(texts)} texts ({source}): bare encode {out['bare_texts_per_s']} texts/s, stage "
        f"{out['stage_cold_texts_per_s']} texts/s cold; warm {warm:.3f} s with {warm_encoded} texts encoded"
    )
    print(f"wrote {path}")
    print(f"overhead_ratio={out['overhead_ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
