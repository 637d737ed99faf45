"""The `Committer` wired to a coordinator: accepted files become events, commits bracket rounds.

Kept apart from the coordinator (protocol.coordinator), which knows nothing of committers.
"""

from __future__ import annotations

from .committer import Committer
from .coordinator import Coordinator, FilesWritten
from .target import CommitReport


class CoordinatedCommitter(Committer):
    """A `Committer` that tells a coordinator about accepted files and finished commits.

    Works unchanged under `PipelinedCommitter`: `accept` runs on the engine's
    thread (the event is held while the previous checkpoint commits), `commit`
    on the committer's thread.
    """

    def __init__(self, committer: Committer, coordinator: Coordinator):
        super().__init__(committer.target, committer.commit_user, committer.pending)
        self.coordinator = coordinator

    def accept(self, identifier, committables, overwrite=None, properties=None, acknowledged=False):
        record = super().accept(identifier, committables, overwrite, properties, acknowledged)
        self.coordinator.send(FilesWritten(identifier, list(committables)))
        return record

    def commit(self, identifier, committables, overwrite=None, properties=None,
               already_accepted=False) -> CommitReport:
        self.coordinator.commit_started(identifier)
        try:
            report = super().commit(identifier, committables, overwrite, properties, already_accepted)
        except BaseException:
            self.coordinator.commit_finished(identifier, landed=False)
            raise
        if report.skipped_replay:
            # A replay of a checkpoint that landed before a crash: its files come from the table.
            self.coordinator.catch_up()
        self._round_after(report, identifier)
        return report

    def _round_after(self, report: CommitReport, identifier: int) -> None:
        def attach(round_report):
            report.extra["aggregation"] = round_report
        round_report = self.coordinator.commit_finished(identifier, landed=True, on_round=attach)
        if round_report is not None:
            attach(round_report)

    def _commit_restored(self, record, committables) -> CommitReport:
        # Restored checkpoints commit like any other: events held meanwhile, a round after.
        # (Files of a checkpoint another process accepted reach the bins by `catch_up`.)
        self.coordinator.commit_started(record.identifier)
        try:
            report = super()._commit_restored(record, committables)
        except BaseException:
            self.coordinator.commit_finished(record.identifier, landed=False)
            raise
        self._round_after(report, record.identifier)
        return report

    def restore(self) -> list[CommitReport]:
        reports = super().restore()
        self.coordinator.catch_up()
        return reports
