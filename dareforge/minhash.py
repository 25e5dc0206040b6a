"""MinHash signatures: a seeded estimate of the Jaccard similarity of two token sets, used to find the same
dataset under two source ids (validators) and near-duplicate trajectories (training-data selection)."""

from __future__ import annotations

import numpy as np
import pandas as pd

NUM_HASHES = 128
VALUES_PER_COLUMN = 200
SEED = 20260101
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijection on 64-bit words that scatters bits (wraps around on purpose)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


_SALTS = np.random.default_rng(SEED).integers(0, _MASK64, size=NUM_HASHES, dtype=np.uint64, endpoint=True)


def token_hashes(tokens: list[str]) -> np.ndarray:
    """Stable 64-bit hashes of text tokens (pandas' SipHash with its fixed key)."""
    if not tokens:
        return np.zeros(0, dtype=np.uint64)
    return pd.util.hash_array(np.asarray(tokens, dtype=object))


def minhash(hashes: np.ndarray) -> np.ndarray:
    """The MinHash signature of a set of token hashes: per salt, the smallest mixed value."""
    signature = np.full(NUM_HASHES, _MASK64, dtype=np.uint64)
    if len(hashes):
        for i, salt in enumerate(_SALTS):
            signature[i] = _mix(hashes ^ salt).min()
    return signature


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Estimated Jaccard similarity of two signatures' sets."""
    return float(np.mean(a == b))
