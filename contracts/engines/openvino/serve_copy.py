"""What OpenVINO GenAI serves from a draft copy, written beside it: the exporter's IR of the copy (as ``optimum-cli
export openvino --task text-generation-with-past --weight-format fp32 --trust-remote-code`` writes it) with the target
layer ids in its rt_info (``hidden_layers_list``), where GenAI's ``draft_model`` reads them: the exporter reads no
layer-id key of config.json and writes none. Run by ``convert --to openvino`` in the release's environment; the copy
is then the folder a deployment passes to ``draft_model``.

    python -m contracts.engines.openvino.serve_copy DST IDS_JSON   (one JSON line on stdout)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from contracts.engines.errors import EngineBuildError

IR_FILES = ("openvino_model.xml", "openvino_model.bin")


def write(dst: Path, ids: list[int] | None) -> dict:
    import openvino as ov

    from contracts.engines.openvino.export import export
    from contracts.engines.openvino.pipeline import LAYERS_KEY

    try:
        made = export(dst, keep=False)
    except EngineBuildError as e:
        return {"refused": str(e)}
    model = ov.Core().read_model(str(made.ir / "openvino_model.xml"))
    if ids is not None:
        model.set_rt_info(" ".join(map(str, ids)), LAYERS_KEY)
    ov.save_model(model, str(dst / "openvino_model.xml"), compress_to_fp16=False)
    written = list(IR_FILES)
    for name in ("generation_config.json",):  # what the exporter writes beside the IR that the copy lacks
        if (made.ir / name).is_file() and not (dst / name).exists():
            shutil.copy(made.ir / name, dst / name)
            written.append(name)
    return {"written": written, LAYERS_KEY: ids, "draft_class": made.draft_class}


def main(argv: list[str]) -> int:
    dst, ids = argv
    sys.stdout.write(json.dumps(write(Path(dst), json.loads(ids))) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
