"""workloads/image_folder.py: a tiny ImageNet-layout folder of PNGs written here (lengths, classes, labels,
the exact normalised pixels), each malformed folder's message, and the message without torchvision (CPU, fast).

The tests that read images need torchvision and skip without it; the last one runs everywhere."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from workloads import DatasetFormatError
from workloads.image_folder import load_image_folder

CLASSES = ("cat", "dog", "eel")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
COLOUR = (200, 100, 50)


@pytest.fixture
def torchvision():
    return pytest.importorskip("torchvision", reason="image_folder reads images with torchvision (lowprec[vision])")


def write_png(path: Path, colour: tuple[int, int, int], mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), colour).convert(mode).save(path)


def write_folder(root: Path, test_dir: str = "val", train_per_class: int = 4, test_per_class: int = 2) -> Path:
    """train/ with train_per_class and test_dir/ with test_per_class constant-colour 8x8 PNGs per class."""
    for split, per_class in (("train", train_per_class), (test_dir, test_per_class)):
        for name in CLASSES:
            for i in range(per_class):
                write_png(root / split / name / f"{i}.png", COLOUR)
    return root


def expected_pixels(colour: tuple[int, int, int], size: int) -> torch.Tensor:
    """A constant image as ToTensor and Normalize make it: (c / 255 - mean) / std per channel, float32."""
    value = torch.tensor(colour, dtype=torch.float32) / 255
    value = (value - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    return value.view(3, 1, 1).expand(3, size, size)


def test_splits_classes_and_labels(torchvision, tmp_path):
    data = load_image_folder(write_folder(tmp_path), seed=0, image_size=8)
    assert (len(data.train), len(data.test)) == (12, 6)
    assert data.train.classes == data.test.classes == list(CLASSES)
    assert data.train.targets == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert data.test.targets == [0, 0, 1, 1, 2, 2]
    assert data.input_shape == (3, 8, 8) and data.num_classes == 3 and data.task == "classification"
    assert isinstance(data.train, torch.utils.data.Dataset)


def test_samples_are_normalised_images(torchvision, tmp_path):
    data = load_image_folder(write_folder(tmp_path), seed=0, image_size=8)
    x, y = data.test[3]
    assert y == 1 and x.dtype == torch.float32 and x.shape == (3, 8, 8)
    assert torch.equal(x, expected_pixels(COLOUR, 8))
    # A random crop and flip of a constant image is the same constant image.
    x, y = data.train[11]
    assert y == 2 and torch.equal(x, expected_pixels(COLOUR, 8))


def test_grey_image_becomes_rgb_and_default_size(torchvision, tmp_path):
    write_folder(tmp_path, test_dir="test", test_per_class=1)
    write_png(tmp_path / "test" / "cat" / "0.png", (90, 90, 90), mode="L")
    data = load_image_folder(tmp_path, seed=0)
    assert data.input_shape == (3, 224, 224) and len(data.test) == 3
    x, y = data.test[0]
    assert y == 0 and torch.equal(x, expected_pixels((90, 90, 90), 224))


def test_val_preferred_over_test(torchvision, tmp_path):
    write_folder(tmp_path, test_dir="val", test_per_class=2)
    for name in CLASSES:
        write_png(tmp_path / "test" / name / "0.png", COLOUR)
    assert len(load_image_folder(tmp_path, seed=0, image_size=8).test) == 6


def test_missing_folders(torchvision, tmp_path):
    with pytest.raises(ValueError, match=r"^image_folder needs data_dir: a directory with train/ and val/"):
        load_image_folder(None, seed=0)
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetFormatError) as err:
        load_image_folder(missing, seed=0)
    assert str(err.value) == f"image folder not found: {missing}"
    (tmp_path / "val").mkdir()
    with pytest.raises(DatasetFormatError) as err:
        load_image_folder(tmp_path, seed=0)
    assert str(err.value) == f"image folder has no training split: {tmp_path / 'train'} is not a folder"
    (tmp_path / "val").rmdir()
    (tmp_path / "train").mkdir()
    with pytest.raises(DatasetFormatError) as err:
        load_image_folder(tmp_path, seed=0)
    assert str(err.value) == (f"image folder has no test split: neither {tmp_path / 'val'} nor "
                              f"{tmp_path / 'test'} is a folder")


def test_flat_split_refused(torchvision, tmp_path):
    # ImageNet's raw val/ is flat like this.
    write_png(tmp_path / "train" / "0.png", COLOUR)
    write_png(tmp_path / "val" / "0.png", COLOUR)
    with pytest.raises(DatasetFormatError) as err:
        load_image_folder(tmp_path, seed=0)
    assert str(err.value) == (f"{tmp_path / 'train'}: no class subfolders (each class's images go in a "
                              "subfolder named after the class)")


def test_class_without_images_refused(torchvision, tmp_path):
    write_folder(tmp_path)
    for image in (tmp_path / "val" / "dog").iterdir():
        image.unlink()
    (tmp_path / "val" / "dog" / "notes.txt").write_text("not an image")
    with pytest.raises(DatasetFormatError) as err:
        load_image_folder(tmp_path, seed=0)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'val' / 'dog'}: no images (looked for .jpg, .jpeg, .png,")
    assert "\n" not in message


def test_differing_classes_refused(torchvision, tmp_path):
    write_folder(tmp_path)
    (tmp_path / "val" / "eel").rename(tmp_path / "val" / "fox")
    write_png(tmp_path / "val" / "gnu" / "0.png", COLOUR)
    with pytest.raises(DatasetFormatError) as err:
        load_image_folder(tmp_path, seed=0)
    assert str(err.value) == (f"{tmp_path / 'train'} and {tmp_path / 'val'} hold different classes: "
                              "only in train: eel; only in val: fox, gnu")


def test_without_torchvision(tmp_path, monkeypatch):
    write_folder(tmp_path)
    # None in sys.modules makes ``import torchvision`` fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(ValueError) as err:
        load_image_folder(tmp_path, seed=0)
    assert str(err.value) == 'dataset image_folder needs torchvision: pip install "lowprec[vision]"'


def test_the_dataset_check_says_torchvision_is_missing(monkeypatch):
    # before anything is built: `lowprec validate` refuses image_folder at its line, as torchvision:NAME models
    import workloads
    from workloads import image_folder

    monkeypatch.setitem(sys.modules, "torchvision", None)
    assert workloads.dataset_problem("image_folder", {}) == \
        'dataset image_folder needs torchvision: pip install "lowprec[vision]"'
    assert workloads.dataset_problem("synthetic", {}) is None
    monkeypatch.setattr(image_folder, "import_torchvision", lambda owner: object())
    assert workloads.dataset_problem("image_folder", {}) is None
