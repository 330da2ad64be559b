"""The CUDA source scan (source/cudasource.py) on hostile files and trees (issue 48, item 5): what it finds in
a comment or literal that never closes, a character or raw literal that the old expressions misread, a use
split over lines, and a tree of 1,200 nested folders. How long it takes is bench/hostile_scan.py's (a 1 MiB
file of either unclosed form in well under a second; the old expressions took over 120 s per 256 KiB): these
tests assert what is found."""

from __future__ import annotations

from pathlib import Path

from buildkit.core.treewalk import remove_tree
from buildkit.source.cudasource import cub_dropped_iterator_uses, long_double_uses

KIB = 1024


def one_file(root: Path, text: str, name: str = "k.cu") -> Path:
    (root / name).write_text(text)
    return root


def test_a_comment_that_never_closes_hides_what_follows_it(tmp_path):
    # 16 KiB of /*x with no */: everything after the first /* is comment, as for nvcc
    text = "long double a;\n" + "/*x" * (16 * KIB // 3) + "long double b; cuda::discard_iterator();\n"
    assert long_double_uses(one_file(tmp_path, text)) == [("k.cu", 1)]
    assert cub_dropped_iterator_uses(tmp_path) == []


def test_a_string_that_never_closes_ends_at_its_line(tmp_path):
    # "\ repeated: every quote escaped, the literal runs to the end of its line and no further
    text = 'const char *s = ' + '"\\' * (16 * KIB // 2) + ' long double in it;\nlong double c;\n'
    assert long_double_uses(one_file(tmp_path, text)) == [("k.cu", 2)]


def test_a_character_literal_of_a_quote_starts_no_string(tmp_path):
    text = "char q = '\"'; long double x; const char *s = \"y\";\nint n = 1'000'000; long double z;\n" \
           "auto w = u8'a'; long double v;\n"
    assert long_double_uses(one_file(tmp_path, text)) == [("k.cu", 1), ("k.cu", 2), ("k.cu", 3)]


def test_a_raw_string_is_one_literal_over_its_lines(tmp_path):
    text = 'const char *r = R"x(\nlong double inside;\n"quoted" )" still\n)x"; long double after;\n'
    assert long_double_uses(one_file(tmp_path, text)) == [("k.cu", 4)]


def test_a_use_split_over_lines_is_named_in_one_line(tmp_path):
    text = "#include <cub/cub.cuh>\nvoid f() {\n  auto d = cuda ::\n      discard_iterator();\n}\n"
    assert cub_dropped_iterator_uses(one_file(tmp_path, text)) == [("k.cu", 3, "cuda::discard_iterator")]


def deep_tree(root: Path, depth: int) -> Path:
    """root/d/d/.../d (depth folders), made one level at a time (Path.mkdir(parents=True) recurses too)."""
    folder = root
    for _ in range(depth):
        folder = folder / "d"
        folder.mkdir()
    return folder


def test_a_tree_of_1200_nested_folders_is_scanned_and_removed(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    bottom = deep_tree(tree, 1200)
    (bottom / "deep.cu").write_text("#include <cub/cub.cuh>\nlong double x; auto d = cuda::discard_iterator();\n")
    (tree / "top.cuh").symlink_to(bottom / "deep.cu")  # a link is never a source of the tree
    relative = "d/" * 1200 + "deep.cu"
    assert long_double_uses(tree) == [(relative, 2)]
    assert cub_dropped_iterator_uses(tree) == [(relative, 2, "cuda::discard_iterator")]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("x")
    (bottom / "link-out").symlink_to(outside)
    remove_tree(tree)
    assert not tree.exists() and (outside / "kept").read_text() == "x"  # the link went, not what it named
