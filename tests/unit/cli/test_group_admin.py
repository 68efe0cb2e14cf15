"""`ketch group delete | reset-offsets` without a cluster: the arguments each refuses (argparse's
exit 2, with the reason), and `delete` asking again for a group whose coordinator moves while it
keeps each other group's answer (a fake client stands in for the cluster)."""

from __future__ import annotations

import argparse
import datetime
from typing import Any, cast

import pytest

from cli import group as cli_group
from cli import group_admin
from client.client import Client
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    Coordinator,
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    Request,
    Response,
)

COORDINATORS = {"a": Address("127.0.0.1", 9092), "b": Address("127.0.0.1", 9093)}


def test_topic_arguments() -> None:
    assert group_admin.topic_arg("orders") == ("orders", None)
    assert group_admin.topic_arg("orders:2,0,2") == ("orders", (0, 2))
    for bad, reason in [
        (":1", "no topic name"),
        ("orders:", "partitions must be numbers"),
        ("orders:a", "partitions must be numbers"),
        ("orders:-1", "a partition is >= 0"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match=reason):
            group_admin.topic_arg(bad)


def test_datetimes_are_kafkas_iso_forms() -> None:
    assert group_admin.datetime_arg("1970-01-01T00:00:01.500Z") == 1_500
    assert group_admin.datetime_arg("1970-01-01T01:00:00+01:00") == 0
    local = datetime.datetime(2024, 5, 6, 7, 8, 9).timestamp()  # no zone: local time
    assert group_admin.datetime_arg("2024-05-06T07:08:09") == int(local * 1000)
    with pytest.raises(argparse.ArgumentTypeError, match="not a date and time"):
        group_admin.datetime_arg("yesterday")


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["delete"], "the following arguments are required: GROUP"),
        (["delete", ""], "a group id must not be empty"),
        (["reset-offsets", "--group", "g", "--to-earliest"], "one of the arguments --topic"),
        (["reset-offsets", "--group", "g", "--all-topics"], "one of the arguments --to-earliest"),
        (
            ["reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"],
            "not allowed with argument --to-earliest",
        ),
        (
            ["reset-offsets", "--group", "g", "--all-topics", "--topic", "t", "--to-latest"],
            "not allowed with argument --all-topics",
        ),
        (["reset-offsets", "--group", "g", "--all-topics", "--shift-by", "x"], "invalid int"),
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_group.main(["group", *argv, "--bootstrap", "127.0.0.1:1"]) == 2
    assert reason in capsys.readouterr().err


class MovingCoordinator:
    """Group "a"'s coordinator answers NOT_COORDINATOR once (it moved); "b"'s is found at once
    and answers NON_EMPTY_GROUP."""

    def __init__(self) -> None:
        self.asked: list[tuple[Address, list[str]]] = []

    async def send_any(self, request: Request, *, timeout_ms: float | None = None) -> Response:
        assert isinstance(request, FindCoordinatorRequest)
        return FindCoordinatorResponse(
            coordinators=[
                Coordinator(key=k, node_id=0, host=COORDINATORS[k].host, port=COORDINATORS[k].port)
                for k in request.coordinator_keys
            ]
        )

    async def send(
        self, target: Address, request: Request, *, timeout_ms: float | None = None
    ) -> Response:
        assert isinstance(request, DeleteGroupsRequest)
        self.asked.append((target, request.groups_names))
        codes = {"b": ErrorCode.NON_EMPTY_GROUP}
        codes["a"] = ErrorCode.NOT_COORDINATOR if len(self.asked) == 1 else ErrorCode.NONE
        return DeleteGroupsResponse(
            results=[
                DeletableGroupResult(group_id=g, error_code=codes[g]) for g in request.groups_names
            ]
        )


async def test_delete_asks_again_only_for_a_group_whose_coordinator_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(group_admin, "RETRY_S", 0.0)
    cluster = MovingCoordinator()
    outcome = await group_admin.delete_groups(cast(Client, cast(Any, cluster)), ["a", "b"])
    assert outcome == {"a": ErrorCode.NONE, "b": ErrorCode.NON_EMPTY_GROUP}
    assert cluster.asked == [
        (COORDINATORS["a"], ["a"]),
        (COORDINATORS["b"], ["b"]),
        (COORDINATORS["a"], ["a"]),  # only the group that was not answered for good
    ]
