"""The contracts ng-traj reads and writes, mirroring NeMo Gym field for field."""

from ng_traj.contract.base import ModelServerRef
from ng_traj.contract.capture import ModelCallRecord
from ng_traj.contract.observations import (
    AgentInvocation,
    AgentObservationBundle,
    ContextCompactionObservation,
    ModelCallRef,
    ObservationGap,
    SandboxObservation,
    ToolCallObservation,
)
from ng_traj.contract.trajectory import (
    CONTRACT_REVISION,
    SCHEMA_VERSION,
    TrajectoryModelCall,
    TrajectoryRecord,
    TrajectoryResponseMetadata,
    TrajectoryTokenStats,
    TrajectoryToolCall,
    TrajectoryTurn,
)

__all__ = [
    "CONTRACT_REVISION",
    "SCHEMA_VERSION",
    "AgentInvocation",
    "AgentObservationBundle",
    "ContextCompactionObservation",
    "ModelCallRecord",
    "ModelCallRef",
    "ModelServerRef",
    "ObservationGap",
    "SandboxObservation",
    "ToolCallObservation",
    "TrajectoryModelCall",
    "TrajectoryRecord",
    "TrajectoryResponseMetadata",
    "TrajectoryTokenStats",
    "TrajectoryToolCall",
    "TrajectoryTurn",
]
