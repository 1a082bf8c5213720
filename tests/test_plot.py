"""Pictures (solver/results/plot.py): panels, the up direction, links, MP4 checks, large models.

No integration here: results are made by hand, so the tests are about the
pictures, and fast.
"""

import numpy as np
import pytest
import xarray as xr
from PIL import Image

import solver
from solver.results import plot
from solver.errors import InputError
from sweep.cli.app import main

CHAIN = """Title: Hanging pair
Kind: Lagrangian
PhysicalParams: {m: 1.0, g: 9.81}
Coordinates: {R1: 3, R2: 3}
KineticEnergy: m/2*(dot(R1', R1') + dot(R2', R2'))
PotentialEnergy: -m*g*(R1[2] + R2[2])
ProblemData:
  tend: 1
  positions: {R1: [0, 0, 1], R2: [0, 0, 2]}
  fixedpositions: {R1, R2}
  velocities: {R1: [0, 0, 0], R2: [0, 0, 0]}
Animation:
  Up: -z
  Points: {O: [0, 0, 0], R1: R1, R2: R2}
  Links: [[O, R1], [R1, R2]]
  frames: 4
"""


@pytest.mark.parametrize("dim", [2, 3])
def test_every_up_direction_is_a_rotation_that_draws_up_upward(dim):
    for axis in "xyz"[:dim]:
        for sign in (1, -1):
            M, labels = plot.up_transform(f"{'-' if sign < 0 else '+'}{axis}", dim)
            np.testing.assert_allclose(M @ M.T, np.eye(dim))
            assert np.linalg.det(M) == pytest.approx(1.0)      # never a mirror image
            up = np.zeros(dim)
            up["xyz".index(axis)] = sign
            np.testing.assert_allclose(M @ up, np.eye(dim)[-1])  # drawn along display +z (+y in 2-D)
            assert labels[-1] == ("-" if sign < 0 else "") + axis
    M, labels = plot.up_transform(None, dim)
    np.testing.assert_allclose(M, np.eye(dim))                   # default: as before
    with pytest.raises(InputError, match="Animation.Up"):
        plot.up_transform("z" if dim == 2 else "w", dim)


def test_vector_variables_get_one_labelled_panel_per_component(tmp_path):
    t = np.linspace(0, 1, 5)
    ds = xr.Dataset({"B": (("time", "axis"), np.c_[t, -t], {"units": "m"}),
                     "q": (("time", "q_index"), np.ones((5, 40))),
                     "theta": ("time", np.sin(t), {"units": "rad"})},
                    coords={"time": ("time", t, {"units": "s"}), "axis": ["x", "y"]},
                    attrs={"variables": ["B", "q", "theta"], "title": "panels"})
    panels = plot._panels(ds, ["B", "q", "theta"])
    assert [label for label, _ in panels[:2]] == ["B[x] [m]", "B[y] [m]"]
    np.testing.assert_allclose(panels[1][1][0][1], -t)
    # 40 components would be 40 panels: they share one, 12 lines shown, and say so.
    assert panels[2][0] == "q (12 of 40)" and len(panels[2][1]) == 12
    assert panels[3][0] == "theta [rad]"
    png = tmp_path / "p.png"
    plot.plot_timeseries(ds, str(png))
    with Image.open(png) as im:
        assert im.size[1] > 4 * 150                     # four panels tall


def test_a_link_to_an_unknown_point_is_refused_at_load():
    text = CHAIN.replace("  Points: {O: [0, 0, 0], R1: R1, R2: R2}\n", "")   # R1, R2 by default
    with pytest.raises(InputError, match="link end 'O' is not a drawn point.*add it to Animation.Points"):
        solver.load(text)


def _chain_result(model):
    t = np.linspace(0, 1, 11)
    R1 = np.c_[0.3 * np.sin(t), 0 * t, np.ones_like(t)]
    return xr.Dataset({"R1": (("time", "R1_index"), R1), "R2": (("time", "R2_index"), 2 * R1)},
                      coords={"time": t}, attrs={"title": model.title})


def test_a_model_whose_z_points_down_is_drawn_hanging_with_every_link(tmp_path):
    model = solver.load(CHAIN)
    ds = _chain_result(model)
    points = model.point_series(ds)
    assert set(points) == {"O", "R1", "R2"}
    assert model.links == [("O", "R1"), ("R1", "R2")]
    M, _ = plot.up_transform(model.animation["up"], 3)
    shown = {k: v @ M.T for k, v in points.items()}
    assert (shown["R2"][:, 2] < shown["R1"][:, 2]).all() and (shown["R1"][:, 2] < 0).all()
    gif = tmp_path / "chain.gif"
    plot.animate(model, ds, str(gif))
    with Image.open(gif) as im:
        assert im.n_frames == 4


def test_a_following_camera_keeps_a_travelling_body_in_a_window_of_its_own_size(tmp_path):
    """A pair that falls 50 m while 1 m apart: fixed axes would shrink it to
    a dot; following R1 (or the pair's mean) keeps it in the same small box."""
    text = CHAIN.replace("  frames: 4\n", "  frames: 4\n  follow: [R1, R2]\n")
    model = solver.load(text)
    assert model.animation["follow"] == ["R1", "R2"]
    t = np.linspace(0, 3, 7)
    drop = 0.5 * 9.81 * t ** 2
    R1 = np.c_[0 * t, 0 * t, 1 + drop]
    ds = xr.Dataset({"R1": (("time", "R1_index"), R1), "R2": (("time", "R2_index"), R1 + [0, 0, 1])},
                    coords={"time": t})
    M, _ = plot.up_transform(model.animation["up"], 3)
    points = {k: v @ M.T for k, v in model.point_series(ds).items() if k != "O"}
    lims = plot.follow_limits(points, ["R1", "R2"])
    assert lims.shape == (7, 3, 2)
    centre = (points["R1"] + points["R2"]) / 2
    np.testing.assert_allclose(lims.mean(axis=2), centre)
    width = lims[:, :, 1] - lims[:, :, 0]
    np.testing.assert_allclose(width, 1.2)   # half the pair (0.5 m each side of the centre), padded 1.2x, doubled
    # Relative Scene.limits: the same offsets around the centre at every time.
    rel = plot.follow_limits(points, ["R1"], [[-2, 2], [-2, 2], [-3, 1]], M)
    np.testing.assert_allclose(rel[:, :, 1] - rel[:, :, 0], [[4, 4, 4]] * 7)
    with pytest.raises(InputError, match="Animation.follow: unknown point 'R3'; the drawn points are R1, R2"):
        plot.follow_limits(points, ["R3"])
    gif = tmp_path / "falling.gif"
    plot.animate(model, ds, str(gif))
    with Image.open(gif) as im:
        assert im.n_frames == 4


def test_frames_are_subsampled_to_the_time_budget(tmp_path):
    model = solver.load("configs/mechanisms/cloth.yaml")   # 5 x 5 grid
    T = 60
    r = np.tile(np.arange(75.0), (T, 1)) / 10
    ds = xr.Dataset({"r": (("time", "r_index"), r)}, coords={"time": np.linspace(0, 1, T)})
    gif = tmp_path / "cloth.gif"
    plot.animate(model, ds, str(gif), frames=50, budget_s=1e-6)
    with Image.open(gif) as im:
        assert im.n_frames == 2                          # the fewest an animation has
    plot.animate(model, ds, str(gif), frames=5, budget_s=60)
    with Image.open(gif) as im:
        assert im.n_frames == 5


def test_mp4_without_ffmpeg_fails_before_solving_and_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plot, "_ffmpeg_available", lambda: False)
    model = tmp_path / "chain.yaml"
    model.write_text(CHAIN)
    assert main(["animate", str(model), "--out", str(tmp_path / "a.mp4")]) == 2
    err = capsys.readouterr().err
    assert "MP4 needs ffmpeg" in err and "pip install imageio-ffmpeg" in err
    assert "mechsweep[video]" in err and "solving" not in err
