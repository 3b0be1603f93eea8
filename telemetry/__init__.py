"""The training telemetry client both front ends share: meter, snapshots, pusher, no framework.

The Keras callback (mirrorwatch.trainer) and the torch monitor (mirrorwatch.torch) count steps
into one :class:`~mirrorwatch.telemetry.client.Telemetry` each; nothing here imports
TensorFlow or torch.
"""
