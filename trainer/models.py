"""The models and input pipelines of mirrorwatch-train: synthetic by default, nothing downloaded."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from mirrorwatch.trainer.keras_api import keras

CLASSES = 10
SEQUENCE_LENGTH = 128
VOCABULARY = 8192
SYNTHETIC_BATCHES = 8  # distinct random batches, repeated: an input pipeline that never waits


@dataclass(frozen=True)
class Job:
    """What to train: the model's name, its input size and where examples come from."""

    model: str
    image_size: int
    data: str | None = None
    seed: int = 0
    classes: int = CLASSES


def default_image_size(model: str) -> int:
    return 224 if model == "resnet50" else 32


def classes_in(data: str | None) -> int:
    """Classes of an image directory (one subfolder each); the synthetic default otherwise."""
    if data is None or not os.path.isdir(data):
        return CLASSES
    folders = [name for name in os.listdir(data) if os.path.isdir(os.path.join(data, name))]
    return max(len(folders), 1) if folders else CLASSES


def build_model(job: Job) -> Any:
    """A compiled Keras model; call it inside the strategy's scope."""
    if job.model == "cnn":
        model = _cnn(job.image_size, job.classes)
    elif job.model == "resnet50":
        model = keras.applications.ResNet50(
            weights=None, input_shape=(job.image_size, job.image_size, 3), classes=job.classes
        )
    elif job.model == "transformer":
        model = _transformer(job.classes)
    else:
        raise ValueError(f"unknown model {job.model!r}")
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        steps_per_execution=1,  # more fails under MirroredStrategy in this Keras (keras#19246)
    )
    return model


def _cnn(size: int, classes: int) -> Any:
    inputs = keras.Input((size, size, 3), name="image")
    x = keras.layers.Conv2D(16, 3, activation="relu", padding="same")(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(32, 3, activation="relu", padding="same")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(64, activation="relu")(x)
    outputs = keras.layers.Dense(classes, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="cnn")


def _transformer(classes: int, layers: int = 2, width: int = 128, heads: int = 4) -> Any:
    """A small BERT-like encoder: token and position embeddings, post-norm blocks, [CLS] head."""
    tokens = keras.Input((SEQUENCE_LENGTH,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCABULARY, width)(tokens)
    positions = keras.layers.Embedding(SEQUENCE_LENGTH, width)(
        tf.range(SEQUENCE_LENGTH)[None, :]  # keras.ops.arange on TensorFlow; tf_keras has no ops
    )
    x = keras.layers.LayerNormalization()(x + positions)
    for _ in range(layers):
        attention = keras.layers.MultiHeadAttention(heads, width // heads)(x, x)
        x = keras.layers.LayerNormalization()(x + attention)
        hidden = keras.layers.Dense(4 * width, activation="gelu")(x)
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(width)(hidden))
    outputs = keras.layers.Dense(classes, activation="softmax", dtype="float32")(x[:, 0])
    return keras.Model(tokens, outputs, name="transformer")


def dataset(job: Job, global_batch_size: int, skip: int = 0) -> Any:
    """An endless ``tf.data.Dataset`` of ``(inputs, label)`` batches of the global batch size.

    ``skip``: start at that batch, where a resumed run left off.
    """
    if job.data is not None:
        return _from_files(job, global_batch_size, skip)
    generator = tf.random.Generator.from_seed(job.seed)
    examples = SYNTHETIC_BATCHES * global_batch_size
    if job.model == "transformer":
        inputs = generator.uniform((examples, SEQUENCE_LENGTH), 0, VOCABULARY, dtype=tf.int32)
    else:
        inputs = generator.uniform((examples, job.image_size, job.image_size, 3))
    labels = generator.uniform((examples,), 0, CLASSES, dtype=tf.int32)
    return (
        tf.data.Dataset.from_tensor_slices((inputs, labels))
        .repeat()
        .batch(global_batch_size, drop_remainder=True)
        .skip(skip % SYNTHETIC_BATCHES)  # the same batches over and over
        .prefetch(tf.data.AUTOTUNE)
    )


def _from_files(job: Job, global_batch_size: int, skip: int) -> Any:
    """An image directory (one folder per class) or TFRecord files of ``image`` + ``label``."""
    if job.model == "transformer":
        raise ValueError("--data holds images; the transformer trains on synthetic tokens only")
    path = str(job.data)
    size = (job.image_size, job.image_size)
    if os.path.isdir(path) and not any(name.endswith(".tfrecord") for name in os.listdir(path)):
        images = keras.utils.image_dataset_from_directory(
            path, image_size=size, batch_size=None, shuffle=True, seed=job.seed
        )
        images = images.map(lambda image, label: (image / 255.0, label))
    else:
        files = (
            [os.path.join(path, name) for name in sorted(os.listdir(path))]
            if os.path.isdir(path)
            else [path]
        )
        features = {
            "image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
        }

        def parse(record: Any) -> tuple[Any, Any]:
            example = tf.io.parse_single_example(record, features)
            image = tf.io.decode_image(example["image"], channels=3, expand_animations=False)
            image = tf.image.resize(image, size) / 255.0
            return image, tf.cast(example["label"], tf.int32)

        images = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    # Skipped batches are read and decoded: the shuffle order, seeded, repeats the killed run's.
    batches = images.repeat().batch(global_batch_size, drop_remainder=True).skip(skip)
    return batches.prefetch(tf.data.AUTOTUNE)
