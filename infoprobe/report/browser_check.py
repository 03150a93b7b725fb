"""Open a report in headless Chromium: every image must render; save a screenshot.

    python -m infoprobe.report.browser_check REPORT_DIR [--screenshot PATH]

Loads ``REPORT_DIR/report.html`` through a ``file://`` URL (no server), dumps the DOM after
the page's load handler has tagged every ``<img>`` with ``data-rendered="yes|no"``
(``naturalWidth > 0``), then takes a full-page screenshot (default
``REPORT_DIR/screenshot.png``). Exit codes: 0 all images rendered, 1 a check failed,
2 no Chromium found. Chromium runs with a fresh profile in a temporary folder, no network
services, no sandbox (containers run as root) and no GPU.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infoprobe.base.atomic import temp_name
from infoprobe.base.errors import UserError

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--run-all-compositor-stages-before-draw",
)
ATTEMPTS = 2
"""Headless Chromium occasionally hangs on a loaded machine: one retry after a timeout."""
WINDOW_WIDTH = 1280
MAX_HEIGHT = 16000


class BrowserCheckError(UserError):
    """The report did not load, or an image did not render, in the browser."""


@dataclass(frozen=True)
class BrowserCheck:
    """Outcome: images found / rendered by the browser, page height, screenshot path."""

    n_images: int
    n_rendered: int
    page_height: int
    screenshot: Path


def find_chromium() -> str | None:
    """Path of a Chromium / Chrome executable on PATH, or None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _run_chromium(binary: str, args: Sequence[str], timeout: float) -> str:
    for attempt in range(ATTEMPTS):
        with tempfile.TemporaryDirectory(prefix="infoprobe-chromium-") as profile:
            cmd = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
            try:
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=timeout, check=False
                )
                break
            except subprocess.TimeoutExpired:
                if attempt == ATTEMPTS - 1:
                    raise BrowserCheckError(
                        f"chromium did not finish within {timeout:.0f} s ({ATTEMPTS} attempts)"
                    ) from None
    if proc.returncode != 0:
        raise BrowserCheckError(
            f"chromium exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}"
        )
    return proc.stdout


def parse_dom(dom: str) -> tuple[int, int, int]:
    """(images, images tagged rendered, page height) from a dumped DOM."""
    body = re.search(r"<body[^>]*>", dom)
    if body is None or "data-images-rendered" not in body.group(0):
        raise BrowserCheckError(
            "the page's load handler did not run (no data-images-rendered on <body>): the "
            "page failed to load or is not an infoprobe report"
        )
    tags = re.findall(r"<img\b[^>]*>", dom)
    rendered = sum('data-rendered="yes"' in tag for tag in tags)
    height = re.search(r'data-page-height="(\d+)"', body.group(0))
    return len(tags), rendered, int(height.group(1)) if height else 2000


def check_report(
    report_dir: str | Path, screenshot: str | Path | None = None, *, timeout: float = 45.0
) -> BrowserCheck:
    """Load ``report_dir/report.html`` in headless Chromium and screenshot it.

    Raises BrowserCheckError when Chromium is missing or fails, the page does not load,
    or any image did not render.
    """
    binary = find_chromium()
    if binary is None:
        raise BrowserCheckError(
            f"no Chromium found on PATH (tried {', '.join(CHROMIUM_NAMES)}); on Debian: "
            "apt-get install -y chromium"
        )
    html = Path(report_dir) / "report.html"
    if not html.is_file():
        raise BrowserCheckError(f"{html}: no such report file")
    url = html.resolve().as_uri()
    dom = _run_chromium(binary, ["--dump-dom", url], timeout)
    n_images, n_rendered, height = parse_dom(dom)
    if n_images == 0 or n_rendered != n_images:
        raise BrowserCheckError(f"{html}: {n_rendered} of {n_images} images rendered in Chromium")
    target = Path(screenshot) if screenshot else Path(report_dir) / "screenshot.png"
    # atomic.temp_name's NAME.tmp-<pid>, plus ".png": Chromium picks the format by suffix
    tmp = Path(f"{temp_name(target)}.png")
    window = f"--window-size={WINDOW_WIDTH},{min(max(height, 600), MAX_HEIGHT)}"
    try:
        _run_chromium(binary, [window, f"--screenshot={tmp}", url], timeout)
        if not tmp.is_file():
            raise BrowserCheckError(f"chromium wrote no screenshot to {tmp}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return BrowserCheck(n_images, n_rendered, height, target)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infoprobe.report.browser_check",
        description="Open REPORT_DIR/report.html in headless Chromium, check that every "
        "image renders, and save a full-page screenshot.",
    )
    parser.add_argument("report_dir", type=Path, help="folder holding report.html")
    parser.add_argument(
        "--screenshot",
        type=Path,
        default=None,
        help="PNG to write (default: REPORT_DIR/screenshot.png)",
    )
    args = parser.parse_args(argv)
    if find_chromium() is None:
        print(
            "no Chromium found on PATH; install it (apt-get install -y chromium)", file=sys.stderr
        )
        return 2
    try:
        result = check_report(args.report_dir, args.screenshot)
    except BrowserCheckError as exc:
        print(f"browser check failed: {exc}", file=sys.stderr)
        return 1
    print(
        f"{result.n_rendered}/{result.n_images} images rendered; page height "
        f"{result.page_height}px; screenshot {result.screenshot}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
