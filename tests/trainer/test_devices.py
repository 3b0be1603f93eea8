"""Replica -> physical GPU: by PCI bus id from TensorFlow's description, never by index."""

from __future__ import annotations

from mirrorwatch.telemetry.devices import (
    ReplicaDevice,
    bus_id_from_description,
    bus_ids_for_process,
    bus_ids_from_env,
    gpu_bus_ids,
    match_replicas,
    uuid_resolver,
)

# NVML lists GPUs in PCI order, whatever CUDA does.
NVML = {
    "00000000:1B:00.0": "GPU-00000000-aaaa-0000-0000-000000000000",
    "00000000:3B:00.0": "GPU-11111111-bbbb-0000-0000-000000000000",
    "00000000:88:00.0": "GPU-22222222-cccc-0000-0000-000000000000",
    "00000000:AF:00.0": "GPU-33333333-dddd-0000-0000-000000000000",
}


def description(ordinal: int, bus_id: str) -> str:
    return (
        f"device: {ordinal}, name: NVIDIA A100-SXM4-80GB, pci bus id: {bus_id}, "
        "compute capability: 8.0"
    )


def replica_device(index: int) -> str:
    return f"/job:localhost/replica:0/task:0/device:GPU:{index}"


def test_bus_id_is_parsed_from_tensorflows_description() -> None:
    assert bus_id_from_description(description(0, "0000:1b:00.0")) == "0000:1b:00.0"


def test_description_without_bus_id_gives_none() -> None:
    assert bus_id_from_description("device: 0, name: Fake GPU") is None
    assert bus_id_from_description("") is None


def test_nvml_and_tensorflow_spellings_normalise_to_the_same_id() -> None:
    value = "00000000:1B:00.0,0000:1b:00.0,1b:00.0,not a bus id"
    assert bus_ids_from_env(value) == ["0000:1b:00.0"] * 3 + [None]
    assert uuid_resolver({"00000000:1B:00.0": "GPU-a"})("0000:1b:00.0") == "GPU-a"


def test_shuffled_cuda_order_maps_each_replica_to_its_own_gpu() -> None:
    # CUDA's fastest-first order put the GPU at bus 88 first and the one at 1b last.
    listing = [
        ("/device:GPU:0", description(0, "0000:88:00.0")),
        ("/device:GPU:1", description(1, "0000:3b:00.0")),
        ("/device:GPU:2", description(2, "0000:1b:00.0")),
    ]
    replicas = match_replicas(
        [replica_device(i) for i in range(3)], gpu_bus_ids(listing), uuid_resolver(NVML)
    )
    assert [r.uuid for r in replicas] == [
        NVML["00000000:88:00.0"],
        NVML["00000000:3B:00.0"],
        NVML["00000000:1B:00.0"],
    ]
    assert [r.pci_bus_id for r in replicas] == ["0000:88:00.0", "0000:3b:00.0", "0000:1b:00.0"]


def test_cuda_visible_devices_renumbering_still_maps_to_the_right_uuids() -> None:
    # CUDA_VISIBLE_DEVICES=3,2: TensorFlow's GPU:0 is NVML's GPU 3 and GPU:1 is NVML's GPU 2.
    listing = [
        ("/device:GPU:0", description(0, "0000:af:00.0")),
        ("/device:GPU:1", description(1, "0000:88:00.0")),
    ]
    replicas = match_replicas(
        [replica_device(0), replica_device(1)], gpu_bus_ids(listing), uuid_resolver(NVML)
    )
    assert replicas == [
        ReplicaDevice(0, replica_device(0), "0000:af:00.0", NVML["00000000:AF:00.0"]),
        ReplicaDevice(1, replica_device(1), "0000:88:00.0", NVML["00000000:88:00.0"]),
    ]


def test_replica_order_follows_the_strategy_not_the_listing() -> None:
    listing = [
        ("/device:GPU:0", description(0, "0000:1b:00.0")),
        ("/device:GPU:1", description(1, "0000:3b:00.0")),
    ]
    replicas = match_replicas([replica_device(1), replica_device(0)], gpu_bus_ids(listing))
    assert [r.pci_bus_id for r in replicas] == ["0000:3b:00.0", "0000:1b:00.0"]


def test_one_gpu_split_into_logical_gpus_maps_both_to_it() -> None:
    listing = [
        ("/device:GPU:0", description(0, "0000:1b:00.0")),
        ("/device:GPU:1", description(1, "0000:3b:00.0")),
    ]
    # The first physical GPU carries two logical GPUs: GPU:0 and GPU:1 are on bus 1b.
    assert gpu_bus_ids(listing, [2, 1]) == {0: "0000:1b:00.0", 1: "0000:1b:00.0", 2: "0000:3b:00.0"}


def test_without_nvml_the_bus_id_alone_is_sent() -> None:
    listing = [("/device:GPU:0", description(0, "0000:1b:00.0"))]
    [replica] = match_replicas([replica_device(0)], gpu_bus_ids(listing), resolve_uuid=None)
    assert replica.pci_bus_id == "0000:1b:00.0"
    assert replica.uuid is None


def test_a_gpu_nvml_does_not_know_keeps_its_bus_id_without_uuid() -> None:
    listing = [("/device:GPU:0", description(0, "0000:02:00.0"))]
    [replica] = match_replicas([replica_device(0)], gpu_bus_ids(listing), uuid_resolver(NVML))
    assert (replica.pci_bus_id, replica.uuid) == ("0000:02:00.0", None)


def test_cpu_replicas_have_no_gpu() -> None:
    devices = ["/job:localhost/replica:0/task:0/device:CPU:0"]
    assert match_replicas(devices, {}) == [ReplicaDevice(0, devices[0])]


def test_env_bus_ids_stand_in_for_cpu_replicas_in_replica_order() -> None:
    overrides = bus_ids_from_env("0000:3b:00.0, 00000000:1B:00.0")
    devices = [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(2)]
    replicas = match_replicas(devices, {}, uuid_resolver(NVML), overrides)
    assert [(r.pci_bus_id, r.uuid) for r in replicas] == [
        ("0000:3b:00.0", NVML["00000000:3B:00.0"]),
        ("0000:1b:00.0", NVML["00000000:1B:00.0"]),
    ]


def test_empty_env_overrides_nothing() -> None:
    assert bus_ids_from_env(None) == []
    assert bus_ids_from_env("") == []


def test_a_rank_of_one_replica_takes_the_id_at_its_local_rank_from_a_list_of_one_per_rank() -> None:
    ids = "0000:1b:00.0,0000:3b:00.0"
    assert bus_ids_for_process(ids, replicas=1, local_rank="1") == ["0000:3b:00.0"]
    assert bus_ids_for_process(ids, replicas=1, local_rank="0") == ["0000:1b:00.0"]
    assert bus_ids_for_process(ids, replicas=1, local_rank="2") == []  # no id for it


def test_without_a_local_rank_or_with_several_replicas_the_ids_are_in_replica_order() -> None:
    ids = "0000:1b:00.0,0000:3b:00.0"
    in_order = ["0000:1b:00.0", "0000:3b:00.0"]
    assert bus_ids_for_process(ids, replicas=2, local_rank=None) == in_order
    assert bus_ids_for_process(ids, replicas=2, local_rank="1") == in_order  # DataParallel
    assert bus_ids_for_process(ids, replicas=1, local_rank=None) == in_order
    assert bus_ids_for_process("0000:3b:00.0", replicas=1, local_rank="1") == ["0000:3b:00.0"]
