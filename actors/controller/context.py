"""The controller actor's state, as one object its control managers work on.

The controller is one actor (actors/controller/controller.py); its event handling is split by
concern, as KRaft splits its QuorumController into control managers: broker liveness
(liveness.py), leader elections (elections.py), AlterPartition (alter_partition.py), controlled
shutdown (shutdown.py), topic creation and deletion (topic_creation.py, topic_deletion.py),
topic changes (partition_creation.py, alter_configs.py) and producer ids (producer_ids.py).
Those modules are functions, not actors: each takes this context and works on the state it
names — the durable model and the journal that writes it, the partition and replica state
machines, the liveness table, the request sender, the alarms that retry failed replica
deletions, and the schedule of prompt preferred elections.

Owner: the controller actor builds the one context in its constructor and passes it to the
managers only from its own handlers, one message at a time, which is what makes every piece of
it safe to change without a lock. Nothing else holds a reference.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from actors.controller.deletion_retries import DeletionRetries
from actors.controller.journal import MetadataJournal
from actors.controller.messages import ControllerConfig
from actors.controller.model import ControllerModel
from actors.controller.outbox import RequestSender
from actors.controller.preferred_leaders import PreferredLeaderSchedule
from actors.controller.sessions import BrokerSessions
from actors.controller.states import PartitionStates, ReplicaStates
from runtime.clock import Clock


@dataclass(slots=True)
class ControllerContext:
    name: str  # the actor's, for log lines
    config: ControllerConfig
    clock: Clock
    rng: random.Random  # topic ids and replica assignment, seeded in tests
    model: ControllerModel  # durable: changed only by `journal.commit`
    journal: MetadataJournal
    partition_states: PartitionStates
    replica_states: ReplicaStates
    sessions: BrokerSessions  # in memory: rebuilt from the model on restart
    sender: RequestSender
    deletion_retries: DeletionRetries  # in memory: a restart resends every deletion anyway
    # In memory: a restarted controller waits for returns it sees itself (preferred_leaders.py).
    preferred_leaders: PreferredLeaderSchedule
    unclean_elections: int = 0  # since this controller started, for `ketch cluster status`
