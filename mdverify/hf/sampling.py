"""``mentored_sampling``: transformers' assisted generation, verified with the mentored rule.

transformers verifies a drafted chain in one module-level function,
``transformers.generation.utils._speculative_sampling(candidate_input_ids, candidate_logits,
candidate_length, new_logits, assistant_ensemble_weight=None)``, which receives the processed
logits (temperature, top-k, top-p already applied) of the drafter at the k drafted positions,
shape (1, k, n), and of the target at the k + 1 positions, shape (1, k + 1, n), and returns
``(valid_tokens, n_matches)``: the accepted drafts plus one token, shape (1, n_matches + 1),
and their count. Inside the context that function is replaced by one with the same signature
and contract that calls ``md.verify`` on those distributions; on exit, also after an
exception, the original is back.

A transformers whose function is missing or has another signature is refused: verification
never falls back to the lossless rule without saying so.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from contextlib import contextmanager

from mdverify.api import _solver
from mdverify.divergences import Divergence
from mdverify.divergences import divergence as lookup
from mdverify.hf.logits import probabilities, shared_vocabulary
from mdverify.torch_adapter import backend_for
from mdverify.validate import as_budgets
from mdverify.verification import verify

#: The parameters of the function replaced, in order, as transformers >= 5.14 defines them.
SIGNATURE = ("candidate_input_ids", "candidate_logits", "candidate_length", "new_logits", "assistant_ensemble_weight")
MIN_TRANSFORMERS = (5, 14)


def _generation_utils():
    """transformers' generation module, refused unless its verification function is the one known."""
    try:
        import transformers
        from transformers.generation import utils
    except ImportError:
        raise ImportError('mdverify.hf needs transformers and PyTorch: pip install "mdverify[torch]"') from None
    version = transformers.__version__
    release = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if release < MIN_TRANSFORMERS:
        raise RuntimeError(f"mentored_sampling needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))}, "
                           f"found {version}")
    function = getattr(utils, "_speculative_sampling", None)
    if function is None:
        raise RuntimeError(f"transformers {version} has no generation.utils._speculative_sampling; "
                           "mentored_sampling does not know how this version verifies drafts")
    found = tuple(inspect.signature(function).parameters)
    if found != SIGNATURE:
        raise RuntimeError(f"transformers {version}'s _speculative_sampling takes {found}, not {SIGNATURE}; "
                           "mentored_sampling does not know how this version verifies drafts")
    return utils


def mentored_speculative_sampling(budget: float, entry: Divergence, method: str, backend: str = "auto"):
    """A drop-in ``_speculative_sampling`` that verifies with the mentored distributions, on the
    logits' device where ``backend`` resolves to the torch backend (``mdverify.torch_adapter``)."""
    import torch

    from mdverify.torch_backend import verify as torch_verify

    def _speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits,
                              assistant_ensemble_weight=None):
        if assistant_ensemble_weight is not None:
            raise ValueError("assistant_ensemble_weight is a lossy rule of its own; inside mentored_sampling "
                             "leave it unset (the mentored rule is the optimum at the budget eps)")
        n = shared_vocabulary(new_logits.shape[-1], candidate_logits.shape[-1])
        drafted = candidate_input_ids[:, -candidate_length:]
        # torch's generator draws the uniforms, so torch.manual_seed reproduces a run as in transformers.
        uniforms = torch.rand((1, candidate_length + 1, 2), dtype=torch.float64).numpy()
        target, draft = probabilities(new_logits, n), probabilities(candidate_logits, n)
        if backend_for(backend, target) == "torch":
            out, accepted = (x.cpu().numpy() for x in torch_verify(target, draft, drafted, budget, entry,
                                                                  uniforms=uniforms))
        else:
            out, accepted = verify(target.cpu().numpy(), draft.cpu().numpy(), drafted.cpu().numpy(), budget, entry,
                                   uniforms=uniforms, method=method)
        n_matches = int(accepted[0])
        valid_tokens = torch.as_tensor(out[:, : n_matches + 1], device=candidate_input_ids.device)
        return valid_tokens, torch.tensor(n_matches, device=candidate_input_ids.device)

    return _speculative_sampling


def _warn_without_sampling(assisted_decoding):
    """``GenerationMixin._assisted_decoding`` that warns when it will not sample (and so not verify)."""
    signature = inspect.signature(assisted_decoding)

    @functools.wraps(assisted_decoding)  # transformers reads the signature to choose the arguments
    def _assisted_decoding(*args, **kwargs):
        config = signature.bind_partial(*args, **kwargs).arguments.get("generation_config")
        if config is not None and not config.do_sample:
            warnings.warn("mentored verification needs sampling: generate(..., do_sample=True); without it "
                          "transformers compares drafts with the target's greedy choice", UserWarning, stacklevel=3)
        return assisted_decoding(*args, **kwargs)

    return _assisted_decoding


@contextmanager
def mentored_sampling(eps: float, divergence: str | Divergence = "kl", method: str = "auto", backend: str = "auto"):
    """Verify transformers' assisted generation with the mentored rule, inside this context.

    Parameters
    ----------
    eps : float
        Budget of every drafted position, :math:`D_f(r \\| p) \\le \\varepsilon`; 0 is
        transformers' own lossless speculative sampling.
    divergence : str or Divergence
    method : {"auto", "sorted", "select"}
    backend : {"auto", "numba", "torch"}
        Where verification runs: "auto" on the CPU with the numba kernels for models on the
        CPU, and with ``mdverify.torch_backend`` on the models' device otherwise.

    Examples
    --------
    >>> from mdverify.hf import mentored_sampling                          # doctest: +SKIP
    >>> with mentored_sampling(eps=0.1, divergence="kl"):                  # doctest: +SKIP
    ...     out = target.generate(ids, assistant_model=drafter, do_sample=True, max_new_tokens=64)
    """
    budget = float(as_budgets(eps, ())[0])
    entry = lookup(divergence)
    _solver(method, 1)  # an unknown method or backend is refused here, not at the first verification
    backend_for(backend)
    utils = _generation_utils()
    original_sampling = utils._speculative_sampling
    original_decoding = utils.GenerationMixin._assisted_decoding
    utils._speculative_sampling = mentored_speculative_sampling(budget, entry, method, backend)
    utils.GenerationMixin._assisted_decoding = _warn_without_sampling(original_decoding)
    try:
        yield
    finally:
        utils._speculative_sampling = original_sampling
        utils.GenerationMixin._assisted_decoding = original_decoding

