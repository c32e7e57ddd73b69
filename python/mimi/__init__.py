"""mimi: Kyutai's Mimi neural audio codec (24 kHz audio <-> 12.5 Hz tokens), the engine of the
``mimi`` command line as a Python module: the same codes, bit for bit, at the same speed.

    import mimi
    codec = mimi.Codec()                         # weights: $MIMI_WEIGHTS, else the HF cache
    codes = codec.encode(audio, sample_rate=16000)   # [n_q, frames] int64
    audio = codec.decode(codes)                  # [1, samples] float32 at 24 kHz

See python/README.md for the whole API.
"""

from ._errors import (DeviceError, Error, InputError, InternalError, OutputError, ResourceError, UsageError,
                      WeightsError)
from ._codec import Codec, StreamDecoder, StreamEncoder, Tokens, read_tokens
from ._dataset import DatasetItem, DatasetWarning, read_dataset
from ._mimi import __version__

__all__ = ["Codec", "StreamEncoder", "StreamDecoder", "Tokens", "read_tokens", "DatasetItem", "DatasetWarning", "read_dataset", "Error",
           "UsageError", "InputError", "WeightsError", "OutputError", "DeviceError", "InternalError", "ResourceError",
           "__version__"]
