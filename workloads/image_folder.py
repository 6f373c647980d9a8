"""A folder of images in ImageNet's layout, streamed: ``train/`` and ``val/`` (or ``test/``), one subfolder per class.

Both splits must hold the same class subfolders; labels are the class names' sorted order (what
torchvision's ``ImageFolder`` does). Images are decoded one sample at a time when the training loop
reads them, never loaded whole, so the folder may be far larger than memory. The raw ImageNet
download keeps its 50,000 validation images in one flat folder: sort them into class subfolders first.

Every image becomes RGB float32 [3, S, S] (S = ``image_size``, default 224) normalised with ImageNet's
mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225):

- train: a random crop of 8% to 100% of the area and aspect ratio 3/4 to 4/3, resized to S x S, flipped
  left-right with probability 1/2 (the Inception-style augmentation of torchvision's ImageNet recipes);
- test: resized so that the shorter side is round(S * 256 / 224), the centre S x S kept.

Needs torchvision (``pip install "lowprec[vision]"``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .dataset_types import CLASSIFICATION, DatasetFormatError, DatasetPair
from .torchvision_models import import_torchvision

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
DEFAULT_IMAGE_SIZE = 224
TRAIN_DIR = "train"
# ImageNet names its held-out split val; other datasets in this layout name it test.
TEST_DIRS = ("val", "test")


def _split_dirs(data_dir: Path) -> tuple[Path, Path]:
    """The train and test folders of ``data_dir``; DatasetFormatError naming the first one missing."""
    if not data_dir.is_dir():
        raise DatasetFormatError(f"image folder not found: {data_dir}")
    train = data_dir / TRAIN_DIR
    if not train.is_dir():
        raise DatasetFormatError(f"image folder has no training split: {train} is not a folder")
    for name in TEST_DIRS:
        if (data_dir / name).is_dir():
            return train, data_dir / name
    raise DatasetFormatError(f"image folder has no test split: neither {data_dir / 'val'} nor "
                             f"{data_dir / 'test'} is a folder")


def _class_names(split: Path) -> list[str]:
    # ImageFolder's own rule (every subfolder is a class, sorted), checked here so that a flat folder and
    # differing class lists are refused before the folders are walked for images.
    names = sorted(entry.name for entry in split.iterdir() if entry.is_dir())
    if not names:
        raise DatasetFormatError(f"{split}: no class subfolders (each class's images go in a subfolder "
                                 "named after the class)")
    return names


def _image_folder(torchvision: Any, split: Path, transform: Any) -> Any:
    # allow_empty: an empty class is reported below with its folder, not as ImageFolder's bare class name.
    dataset = torchvision.datasets.ImageFolder(split, transform=transform, allow_empty=True)
    counts = [0] * len(dataset.classes)
    for target in dataset.targets:
        counts[target] += 1
    for name, count in zip(dataset.classes, counts):
        if count == 0:
            extensions = ", ".join(torchvision.datasets.folder.IMG_EXTENSIONS)
            raise DatasetFormatError(f"{split / name}: no images (looked for {extensions})")
    return dataset


def torchvision_missing() -> str | None:
    """Why image_folder cannot read images here (torchvision not installed, or built for another torch), in one
    line; None if it can."""
    try:
        import_torchvision("dataset image_folder")
    except ValueError as error:
        return str(error)
    return None


def load_image_folder(data_dir: Path | None, seed: int, *, image_size: int | None = None) -> DatasetPair:
    """The train and test splits of ``data_dir`` as streamed torchvision ``ImageFolder`` datasets.

    Each split is a map-style Dataset of ``(image [3, S, S], label)`` with ``.targets`` (every label,
    known from the folder names without decoding an image) and ``.classes``. ``seed`` changes nothing:
    the splits are the folders, and the random crops and flips draw from torch's global RNG when a
    sample is read. That is the seeded main process's RNG when the DataLoader has no workers; with
    workers, torch seeds each one with a base seed drawn from the main process's RNG (or the loader's
    generator) plus the worker's id, so runs with the same seed and worker count augment alike. A
    missing folder, a split without class subfolders, differing class lists or a class without images
    raise DatasetFormatError naming the folder.
    """
    if data_dir is None:
        raise ValueError("image_folder needs data_dir: a directory with train/ and val/ (or test/), "
                         "each holding one subfolder of images per class")
    torchvision = import_torchvision("dataset image_folder")
    transforms = torchvision.transforms
    size = DEFAULT_IMAGE_SIZE if image_size is None else image_size
    train_dir, test_dir = _split_dirs(data_dir)
    train_classes, test_classes = _class_names(train_dir), _class_names(test_dir)
    if train_classes != test_classes:
        only_train = sorted(set(train_classes) - set(test_classes))
        only_test = sorted(set(test_classes) - set(train_classes))
        raise DatasetFormatError(
            f"{train_dir} and {test_dir} hold different classes: only in {train_dir.name}: "
            f"{', '.join(only_train) or 'none'}; only in {test_dir.name}: {', '.join(only_test) or 'none'}"
        )
    normalise = [transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
    train_transform = transforms.Compose(
        [transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), *normalise]
    )
    test_transform = transforms.Compose(
        [transforms.Resize(round(size * 256 / 224)), transforms.CenterCrop(size), *normalise]
    )
    return DatasetPair(
        train=_image_folder(torchvision, train_dir, train_transform),
        test=_image_folder(torchvision, test_dir, test_transform),
        input_shape=(3, size, size),
        num_classes=len(train_classes),
        task=CLASSIFICATION,
    )
