"""Which torso takes which observations: the shape rules of ``--model``, without torch.

The torsos themselves are in :mod:`archzoo.nets`; these rules let the command line refuse
a misfit before it starts any process (and before it imports torch).
"""

from __future__ import annotations

# the convolutional torsos: images only
IMAGE_MODELS = ("nature-cnn", "impala-cnn", "impala-cnn-no-residual", "minatar-cnn")
MODELS = ("mlp", *IMAGE_MODELS)
NATURE_MIN_SIZE = 36  # the Nature torso (Mnih et al. 2015) needs this many pixels per side


def channels_last(obs_shape: tuple[int, ...]) -> bool:
    """An image whose first axis is larger than its last is height × width × channels."""
    return len(obs_shape) == 3 and obs_shape[0] > obs_shape[-1]


def image_hw(obs_shape: tuple[int, ...]) -> tuple[int, int]:
    """An image observation's (height, width), whichever axis holds the channels."""
    h, w = (obs_shape[0], obs_shape[1]) if channels_last(obs_shape) else obs_shape[1:]
    return int(h), int(w)


def image_channels(obs_shape: tuple[int, ...]) -> int:
    return int(obs_shape[-1] if channels_last(obs_shape) else obs_shape[0])


def default_model(obs_shape: tuple[int, ...]) -> str:
    """Images get a CNN (the Nature torso where it fits, else IMPALA's), vectors the MLP."""
    if len(obs_shape) != 3:
        return "mlp"
    h, w = image_hw(obs_shape)
    return "nature-cnn" if min(h, w) >= NATURE_MIN_SIZE else "impala-cnn"


def check_builtin(model: str, obs_shape: tuple[int, ...]) -> str:
    """The built-in torso that ``model`` names for these observations ("auto" resolved);
    ValueError when it cannot take them. A ``package.module:factory`` is returned as is."""
    if model == "auto":
        return default_model(obs_shape)
    if model in IMAGE_MODELS:
        if len(obs_shape) != 3:
            raise ValueError(f"--model {model} needs image observations (3 axes), got "
                             f"shape {tuple(obs_shape)}")
        h, w = image_hw(obs_shape)
        if model == "nature-cnn" and min(h, w) < NATURE_MIN_SIZE:
            raise ValueError(f"--model nature-cnn needs images of at least "
                             f"{NATURE_MIN_SIZE}×{NATURE_MIN_SIZE}, got {h}×{w} "
                             "(try --model impala-cnn)")
    return model


CORES = ("none", "lstm")  # --core: no recurrent core, or an LSTM after the torso


def core_size(core: str, hidden: int) -> int:
    """The width of the recurrent core that ``--core`` names: 0 for ``none``, SIZE for
    ``lstm:SIZE``, ``hidden`` (``--hidden``) for a bare ``lstm``; ValueError, naming the
    flag, for anything else."""
    kind, colon, size = core.partition(":")
    if kind == "none" and not colon:
        return 0
    if kind == "lstm":
        if not colon:
            return int(hidden)
        if size.isdigit() and int(size) > 0:
            return int(size)
    raise ValueError(f"--core {core!r}: expected none, lstm or lstm:SIZE with SIZE a "
                     "positive integer (e.g. lstm:128; a bare lstm is --hidden wide)")
