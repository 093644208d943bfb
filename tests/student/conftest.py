"""Student tests: one torch thread (a shared 2-core machine; oversubscribed threads crawl)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).parent))
