"""A tinker-cookbook dataset builder that reads our chat JSONL (or the store) through our own parser.

The cookbook's `FromConversationFileBuilder` loads JSONL through Arrow and crashes on rows with tool calls or mixed
string/list content; this builder renders each row with the same `conversation_to_datum` path instead.
Imports chz and the cookbook at import time: only the scaffolded Tinker `train_sft.py` and tests import it.
"""

from __future__ import annotations

import random
from pathlib import Path

import chz
import tinker
from tinker_cookbook.supervised.types import ChatDatasetBuilder, SupervisedDataset

from machine_lsp.engines import render
from machine_lsp.scaffold.support import training_conversations


class ChatRowsDataset(SupervisedDataset):
    """Pre-rendered datums cut into fixed-size batches, reshuffled by `set_epoch(seed)`."""

    def __init__(self, data: list[tinker.Datum], batch_size: int, seed: int = 0) -> None:
        self.data = data
        self.batch_size = batch_size
        self.seed = seed
        self.order = list(range(len(data)))
        self.set_epoch(0)

    def set_epoch(self, seed: int = 0) -> None:
        self.order = list(range(len(self.data)))
        random.Random(self.seed + seed).shuffle(self.order)

    def get_batch(self, index: int) -> list[tinker.Datum]:
        picked = self.order[index * self.batch_size : (index + 1) * self.batch_size]
        return [self.data[i] for i in picked]

    def __len__(self) -> int:
        return -(-len(self.data) // self.batch_size)


@chz.chz
class MachineChatBuilder(ChatDatasetBuilder):
    """Rows from `data_path` (chat JSONL) or, when empty, the machine-lsp store of `project_dir`."""

    data_path: str = ""
    project_dir: str = "."
    seed: int = 0

    def __call__(self) -> tuple[ChatRowsDataset, None]:
        cc = self.common_config
        conversations = training_conversations(self.data_path or None, Path(self.project_dir))
        datums = render.to_datums(
            conversations,
            self.renderer,
            train_on=cc.train_on_what or render.DEFAULT_TRAIN_ON,
            max_length=cc.max_length,
        )
        return ChatRowsDataset(datums, cc.batch_size, self.seed), None
