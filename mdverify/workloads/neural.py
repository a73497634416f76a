"""A neural target and drafter trained on the Python standard library's source (SPEC section 11).

Nothing is downloaded: the corpus is the source of a fixed list of standard-library modules
that exist in Python 3.10 to 3.13, and a fixed list of other modules is held out. Training is
deterministic from a seed (one CPU thread, seeded batches): a byte-level BPE tokenizer and two
GPT-2 models of transformers' own class, a target of about 3M parameters and a drafter about
ten times smaller. Two target checkpoints are kept, the finished one and an early,
under-trained one (the control for "beating the target").

The trained files are committed beside this module (``neural_pair/``) with their sha256 sums
and the held-out tokens, so every figure computed from them is the same on every Python
version. ``load_pair`` refuses a file whose sum does not match and names the command that
retrains it::

    python -m mdverify.workloads.neural --out mdverify/workloads/neural_pair
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PAIR_DIR = Path(__file__).with_name("neural_pair")
RETRAIN = "python -m mdverify.workloads.neural --out mdverify/workloads/neural_pair"
SUMS = "SHA256SUMS"

#: Training modules, as paths under the standard library without ".py" (all exist in 3.10 to 3.13).
TRAINING = (
    "argparse", "ast", "calendar", "configparser", "contextlib", "copy", "csv", "dataclasses", "difflib",
    "dis", "enum", "ftplib", "functools", "gettext", "glob", "gzip", "hmac", "html/parser", "http/client",
    "http/server", "imaplib", "inspect", "ipaddress", "json/decoder", "json/encoder", "locale",
    "logging/__init__", "mailbox", "mimetypes", "ntpath", "numbers", "operator", "optparse", "os", "pdb",
    "pickle", "pickletools", "platform", "plistlib", "poplib", "posixpath", "pprint", "pstats", "queue",
    "random", "reprlib", "secrets", "selectors", "shutil", "smtplib", "socket", "socketserver", "string",
    "subprocess", "symtable", "tabnanny", "tarfile", "tempfile", "threading", "timeit", "tokenize", "trace",
    "traceback", "types", "typing", "unittest/case", "unittest/mock", "urllib/parse", "urllib/request",
    "uuid", "warnings", "weakref", "zipimport",
)
#: Held-out modules: never seen in training; their tokens are the evaluation text and the prompts.
HELD_OUT = ("bisect", "fractions", "heapq", "netrc", "quopri", "sched", "shlex", "statistics", "textwrap", "wave")

END = "<|endoftext|>"


@dataclass(frozen=True)
class Recipe:
    """Everything that determines the trained files (with the Python version's module sources)."""

    seed: int = 0
    vocab_size: int = 4096
    context: int = 256
    batch: int = 8
    target_steps: int = 2000
    drafter_steps: int = 2000
    early_step: int = 200
    learning_rate: float = 1e-3
    warmup: int = 100
    eval_every: int = 200
    target_shape: tuple = (5, 192, 6)  # layers, width, heads
    drafter_shape: tuple = (2, 64, 2)


def _sources(names) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return [(root / f"{name}.py").read_text(encoding="utf-8") for name in names]


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def _encode(tokenizer, texts: list[str]) -> np.ndarray:
    """One token stream: each text followed by the end token."""
    end = tokenizer.token_to_id(END)
    ids = []
    for text in texts:
        ids.extend(tokenizer.encode(text).ids)
        ids.append(end)
    return np.array(ids, np.int64)


def _config(shape, recipe: Recipe, end_id: int):
    from transformers import GPT2Config

    layers, width, heads = shape
    return GPT2Config(vocab_size=recipe.vocab_size, n_positions=recipe.context, n_embd=width, n_layer=layers,
                      n_head=heads, bos_token_id=end_id, eos_token_id=end_id, pad_token_id=end_id)


def _windows(stream: np.ndarray, context: int) -> np.ndarray:
    """Non-overlapping windows of ``context`` tokens (the evaluation batches)."""
    count = len(stream) // context
    return stream[: count * context].reshape(count, context)


def held_out_loss(model, windows: np.ndarray, batch: int = 16) -> float:
    """Mean next-token cross-entropy (nats) over the windows, teacher-forced."""
    import torch

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(windows), batch):
            x = torch.from_numpy(windows[start:start + batch])
            logits = model(x, attention_mask=torch.ones_like(x)).logits[:, :-1].double()
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                     reduction="sum")
            total += float(loss)
            count += x[:, 1:].numel()
    model.train()
    return total / count


def train_model(shape, recipe: Recipe, steps: int, stream: np.ndarray, held_out: np.ndarray, end_id: int,
                label: str, checkpoints: dict[int, Path] | None = None):
    """Train one GPT-2 model; returns (model, log). Saves the state at each step named in ``checkpoints``."""
    import torch
    from tqdm import tqdm
    from transformers import GPT2LMHeadModel

    torch.manual_seed(recipe.seed)
    model = GPT2LMHeadModel(_config(shape, recipe, end_id))
    optimiser = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=0.1)

    def rate(step):  # linear warm-up, cosine decay to a tenth
        if step < recipe.warmup:
            return (step + 1) / recipe.warmup
        progress = (step - recipe.warmup) / max(1, steps - recipe.warmup)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, rate)
    rng = np.random.default_rng(recipe.seed)
    log = {"parameters": sum(p.numel() for p in model.parameters()), "train": [], "held_out": []}
    running = []
    for step in tqdm(range(1, steps + 1), desc=f"training {label}", file=sys.stderr, mininterval=10):
        starts = rng.integers(0, len(stream) - recipe.context, recipe.batch)
        x = torch.from_numpy(np.stack([stream[s:s + recipe.context] for s in starts]))
        loss = model(x, attention_mask=torch.ones_like(x), labels=x).loss
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        schedule.step()
        running.append(float(loss.detach()))
        if step % 25 == 0:
            log["train"].append([step, float(np.mean(running))])
            running = []
        if step % recipe.eval_every == 0 or step == steps or step in (checkpoints or {}):
            log["held_out"].append([step, held_out_loss(model, held_out)])
        if checkpoints and step in checkpoints:
            save_model(model, checkpoints[step])
    model.eval()
    return model, log


def save_model(model, path: Path) -> None:
    """The weights as safetensors, with the config in the metadata; the output head is tied, not stored."""
    from safetensors.torch import save_file

    state = {name: tensor for name, tensor in model.state_dict().items() if name != "lm_head.weight"}
    save_file(state, str(path), metadata={"config": model.config.to_json_string()})


def _plot(log: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, name in enumerate(("target", "drafter")):
        train, held = np.array(log[name]["train"]), np.array(log[name]["held_out"])
        ax.plot(train[:, 0], train[:, 1], color=f"C{i}", alpha=0.5, label=f"{name}, training batches")
        ax.plot(held[:, 0], held[:, 1], "o-", color=f"C{i}", label=f"{name}, held-out modules")
    ax.axvline(log["recipe"]["early_step"], color="gray", ls=":", label="early target checkpoint")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title("Training the neural pair on the standard library's source")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train(out: Path, recipe: Recipe = Recipe()) -> Path:
    """Train the tokenizer, the drafter and the target; write every file and its sum into ``out``."""
    import torch

    torch.set_num_threads(1)  # one thread: the same floating-point sums on every machine
    torch.use_deterministic_algorithms(True)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    training_texts, held_out_texts = _sources(TRAINING), _sources(HELD_OUT)
    tokenizer = train_tokenizer(training_texts, recipe.vocab_size)
    tokenizer.save(str(out / "tokenizer.json"))
    end_id = tokenizer.token_to_id(END)
    stream, held_out = _encode(tokenizer, training_texts), _encode(tokenizer, held_out_texts)
    np.save(out / "held_out_tokens.npy", held_out.astype(np.uint16))
    windows = _windows(held_out, recipe.context)

    drafter, drafter_log = train_model(recipe.drafter_shape, recipe, recipe.drafter_steps, stream, windows, end_id,
                                       "drafter")
    save_model(drafter, out / "drafter.safetensors")
    target, target_log = train_model(recipe.target_shape, recipe, recipe.target_steps, stream, windows, end_id,
                                     "target", checkpoints={recipe.early_step: out / "target_early.safetensors"})
    save_model(target, out / "target_final.safetensors")

    import tokenizers
    import transformers

    log = {
        "recipe": recipe.__dict__ | {"target_shape": list(recipe.target_shape), "drafter_shape": list(recipe.drafter_shape)},
        "python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__, "training_tokens": int(len(stream)), "held_out_tokens": int(len(held_out)),
        "training_modules": list(TRAINING), "held_out_modules": list(HELD_OUT),
        "seconds": round(time.time() - started, 1), "target": target_log, "drafter": drafter_log,
    }
    (out / "training_log.json").write_text(json.dumps(log, indent=1) + "\n")
    _plot(log, out / "loss.png")
    files = sorted(path for path in out.iterdir() if path.name != SUMS and path.is_file())
    (out / SUMS).write_text("".join(f"{_sha256(path)}  {path.name}\n" for path in files))
    return out


def checked_path(name: str, folder: Path | None = None) -> Path:
    """The path of a committed file of the pair, after its sha256 is checked against SHA256SUMS."""
    folder = PAIR_DIR if folder is None else Path(folder)
    sums_file = folder / SUMS
    if not sums_file.is_file():
        raise ValueError(f"the neural pair is missing ({sums_file} does not exist); train it with: {RETRAIN}")
    sums = dict(line.split()[::-1] for line in sums_file.read_text().splitlines() if line.strip())
    path = folder / name
    if name not in sums or not path.is_file():
        raise ValueError(f"the neural pair's file {path} is missing; train it again with: {RETRAIN}")
    if _sha256(path) != sums[name]:
        raise ValueError(f"the neural pair's file {path} fails its sha256 sum; train it again with: {RETRAIN}")
    return path


def _model(path: Path):
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import GPT2Config, GPT2LMHeadModel

    with safe_open(str(path), "pt") as handle:
        config = GPT2Config.from_dict(json.loads(handle.metadata()["config"]))
    model = GPT2LMHeadModel(config)
    missing, unexpected = model.load_state_dict(load_file(str(path)), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # the tied output head is the only tensor not stored
        raise ValueError(f"{path} does not hold a GPT-2 model of its config: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.eval()


def load_pair(target: str = "final", folder: Path | None = None):
    """(tokenizer, target model, drafter model), every file checked against its sha256 sum.

    ``target`` is ``"final"`` (the finished training run) or ``"early"`` (the under-trained
    checkpoint). The tokenizer is a ``tokenizers.Tokenizer``; the models are transformers'
    ``GPT2LMHeadModel`` in evaluation mode, float32, on the CPU.
    """
    if target not in ("final", "early"):
        raise ValueError(f"target must be 'final' or 'early', got {target!r}")
    from mdverify.torch_adapter import require_torch

    require_torch()
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(checked_path("tokenizer.json", folder)))
    return tokenizer, _model(checked_path(f"target_{target}.safetensors", folder)), _model(checked_path("drafter.safetensors", folder))


def held_out_tokens(folder: Path | None = None) -> np.ndarray:
    """The committed held-out token stream (int64), files separated by the end token."""
    return np.load(checked_path("held_out_tokens.npy", folder)).astype(np.int64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train the neural target/drafter pair (about 45 minutes on 2 cores).")
    parser.add_argument("--out", default=str(PAIR_DIR), help=f"output folder (default: {PAIR_DIR})")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"wrote {train(Path(args.out), Recipe(seed=args.seed))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
