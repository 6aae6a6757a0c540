"""The command line's errors name its options (fedqr._cli_messages.name_options)."""

from __future__ import annotations

import click
import pytest

from fedqr._cli_messages import exit_code, name_options

CTX = click.Context(click.Command("plan", params=[
    click.Option(["--eps"]), click.Option(["--data"]), click.Option(["--proxy-classes"]),
    click.Option(["--test-share"]), click.Option(["--test-data"]),
    click.Option(["--num-clients"]), click.Option(["--seed"]), click.Option(["--lr-decay"]),
    click.Option(["--out", "out_dir"]), click.Option(["--model"])]))


@pytest.mark.parametrize(("given", "expected"), [
    ("eps must be > 0 and finite, got eps=-1.0", "--eps must be > 0 and finite, got --eps=-1.0"),
    ("proxy_classes: the label map names unknown classes",
     "--proxy-classes: the label map names unknown classes"),
    ("proxy_classes must not repeat a class, got proxy_classes='0,0'",
     "--proxy-classes must not repeat a class, got --proxy-classes='0,0'"),
    ("eps must have 1 or num_clients=4 values", "--eps must have 1 or --num-clients=4 values"),
    # named twice already: once
    ("give x_test and y_test, or test_share (--test-share): the share",
     "give x_test and y_test, or --test-share: the share"),
    # the library's name of the test file is the command's --test-data
    ("give a test set (in the file or test_path)", "give a test set (in the file or --test-data)"),
    # a data file's path (FederatedData.from_file) and a learning rate's decay
    ("path (--data) must end in .npz, got path='x.txt'",
     "--data must end in .npz, got --data='x.txt'"),
    ("must be a .csv file like path (--data) 'd.csv'", "must be a .csv file like --data 'd.csv'"),
    ("decay must be >= 0 and finite, got decay=-1.0",
     "--lr-decay must be >= 0 and finite, got --lr-decay=-1.0"),
    ("out_dir must be a folder path, got out_dir='f'",
     "--out must be a folder path, got --out='f'"),
    # a model's errors open with the model given, or with the file that holds it
    ("model 'm.py:make': the factory raised TypeError: make() takes 1 positional argument",
     "--model 'm.py:make': the factory raised TypeError: make() takes 1 positional argument"),
    ("model: the file '/w/m.py' has no function 'missing'",
     "--model: the file '/w/m.py' has no function 'missing'"),
    # a Python spelling quoted beside the option is left as it is (it said --test-share=None)
    ("with --test-share 0.2 ('test_share=0.2' in Python)",
     "with --test-share 0.2 ('test_share=0.2' in Python)"),
])
def test_parameter_names_become_options(given: str, expected: str) -> None:
    assert name_options(given, CTX) == expected


@pytest.mark.parametrize("prose", [
    # words that are also options are left alone in prose
    "data use public-proxy needs --proxy-dataset NAME or --proxy-data FILE, got none",
    "the seed of the data and the eps of each client",
    # paths, quoted values, longer identifiers and options already named
    "/runs/proxy_classes/eps.csv has no column 'test_share' (num_classes=2)",
    "x_test_share must be given with --test-share",
    "weight_decay=0.5 and a decay schedule; the path of the file",
])
def test_prose_paths_and_other_names_are_left_alone(prose: str) -> None:
    assert name_options(prose, CTX) == prose


def test_without_a_command_nothing_changes() -> None:
    assert name_options("eps must be > 0, got eps=-1") == "eps must be > 0, got eps=-1"


def test_a_data_set_found_nowhere_is_bad_input_like_a_corrupt_file() -> None:
    """Exit 2 for a data set no --data-dir, FEDQR_DATA or cache holds (it was 1, while a
    corrupt file was 2); 1 for a fault such as a file that exists but cannot be read."""
    from fedqr.data import ChecksumError, DataNotFoundError

    assert exit_code(DataNotFoundError("FEMNIST not found")) == 2
    assert exit_code(ChecksumError("md5 mismatch")) == 2
    assert exit_code(ValueError("eps must be > 0")) == 2
    assert exit_code(PermissionError(13, "Permission denied")) == 1
    assert exit_code(FileNotFoundError("a cache file vanished")) == 1
