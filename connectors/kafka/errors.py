"""Every user-facing error of the connector: what was wrong, which value, what to do."""

from __future__ import annotations

from dataclasses import dataclass


class ConnectorError(Exception):
    """Base of the connector's errors."""


class OptionError(ConnectorError, ValueError):
    """A data source option is invalid; raised on the driver before any task runs."""

    def __init__(self, option: str, value: object, problem: str, fix: str) -> None:
        self.option, self.value = option, value
        super().__init__(f"option {option}={value!r}: {problem}. {fix}")


class DataLossError(ConnectorError):
    """Offsets that were planned or requested are gone from the broker and failOnDataLoss is true."""


class BrokerError(ConnectorError):
    """The broker could not be reached or answered with an error."""


@dataclass(frozen=True)
class DataLoss:
    """One data-loss event: records [lost_from, lost_to) of topic-partition are not readable."""

    topic: str
    partition: int
    kind: str
    lost_from: int
    lost_to: int

    def describe(self) -> str:
        what = {
            "partition_deleted": "the partition was deleted",
            "new_partition_not_from_zero": "a new partition's log does not start at offset 0",
            "start_below_log_start": "the requested start is below the broker's log-start offset",
            "aged_out_in_range": "records inside the planned range were deleted (retention or delete_records)",
        }[self.kind]
        return (f"data loss on {self.topic}-{self.partition}: {what}; offsets [{self.lost_from}, {self.lost_to}) "
                f"are lost")


FAIL_ON_DATA_LOSS_HINT = (
    "Set failOnDataLoss=false to record the loss and continue from the first available offset, "
    "or restart from offsets that still exist (startingOffsets=earliest).")
