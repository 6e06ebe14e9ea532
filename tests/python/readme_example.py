"""Runs the README's Python example (the first ```python block under "From Python"), as a
user would after `pip install ./python`: tests/python/run.sh runs it from / with the
installed package and no CCL_* variable."""
import re
from pathlib import Path

readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
section = readme[readme.index("## From Python"):]
code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
exec(compile(code, "README.md (From Python)", "exec"), {"__name__": "__main__"})
