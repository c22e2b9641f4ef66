#!/bin/sh
# venv.sh DIR: make a virtual environment at DIR that also sees every package of the base
# image's python3, a virtual environment's included (the GPU machine's own root file
# system keeps its CUDA PyTorch in one). `--system-site-packages` would see only the
# interpreter's own folders, past such an environment; a .pth file that adds the python3's
# site folders as site folders (their own .pth files run too) sees what that python3 sees.
# No pip in DIR: the builds run the base's pip with `--python DIR/bin/python`.
set -eu
dir=${1:?usage: venv.sh DIR}
python3 -m venv --without-pip "$dir"
site=$("$dir/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
python3 - "$site/gpubench-base-image.pth" <<'PY'
import site
import sys

folders = [p for p in site.getsitepackages() if p != sys.argv[1].rsplit("/", 1)[0]]
with open(sys.argv[1], "w") as pth:
    for folder in folders:
        pth.write(f"import site; site.addsitedir({folder!r})\n")
PY
