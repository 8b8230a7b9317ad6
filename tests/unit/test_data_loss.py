import pytest

from streamfill.connectors.kafka import data_loss
from streamfill.connectors.kafka.data_loss import DataLoss
from streamfill.errors import DataLossError
from streamfill.partitions import TopicPartition

pytestmark = pytest.mark.unit
A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def test_start_below_log_start_is_loss_of_the_gap():
    events = data_loss.below_log_start({A: 3, B: 10}, {A: (8, 20), B: (0, 20)})
    assert events == [DataLoss("t", 0, "start_below_log_start", 3, 8)]
    assert data_loss.skip_lost({A: 3, B: 10}, {A: (8, 20), B: (0, 20)}) == {A: 8, B: 10}


def test_deleted_and_new_partitions():
    assert data_loss.deleted_partitions({A: 5, B: 7}, [A]) == [DataLoss("t", 1, "partition_deleted", 7, 7)]
    assert data_loss.new_partitions([B], {B: (4, 9)}) == [DataLoss("t", 1, "new_partition_not_from_zero", 0, 4)]
    assert data_loss.new_partitions([B], {B: (0, 9)}) == []


def test_fail_on_data_loss_names_partition_and_offsets():
    with pytest.raises(DataLossError) as err:
        data_loss.enforce([DataLoss("t", 0, "start_below_log_start", 3, 8)], fail_on_data_loss=True)
    assert "t-0" in str(err.value) and "[3, 8)" in str(err.value) and "failOnDataLoss=false" in str(err.value)


def test_records_instead_of_failing(caplog):
    events = [DataLoss("t", 0, "aged_out_in_range", 3, 8)]
    assert data_loss.enforce(events, fail_on_data_loss=False) == events
    assert "t-0" in caplog.text and "[3, 8)" in caplog.text
