"""The trust boundary: every file the package reads that the caller did not write in code passes through here.

Model folders (``modules.json``, every config file, nested Routers, weights headers), result and part JSON,
calibration files, store metadata, corpora and norm texts are read with these functions, which check names, paths,
types and ranges and raise one error class, :class:`InputFileError` (a ``ValueError``), whose message names the file
and the line or key. No reader outside this package opens such a file itself (``tests/test_trust_boundary.py``
checks the source). The CLI turns an :class:`InputFileError` into one line and exit code 2.

Standard library only (the weights-header check imports nothing heavy either).
"""

from st_magnitude._trust.digests import file_digests, is_sha256, read_recorded_files
from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.json_files import Fields, check_name, parse_json_bytes, parse_json_line, read_json
from st_magnitude._trust.model_files import check_model_files
from st_magnitude._trust.paths import UnsafeModelPathError, check_model_folder, contained, router_config
from st_magnitude._trust.text import read_lines
from st_magnitude._trust.weights import check_safetensors
from st_magnitude._trust.write import write_json_atomic

__all__ = [
    "Fields",
    "InputFileError",
    "UnsafeModelPathError",
    "check_model_files",
    "check_model_folder",
    "check_name",
    "check_safetensors",
    "contained",
    "file_digests",
    "is_sha256",
    "parse_json_bytes",
    "parse_json_line",
    "read_json",
    "read_lines",
    "read_recorded_files",
    "router_config",
    "write_json_atomic",
]
