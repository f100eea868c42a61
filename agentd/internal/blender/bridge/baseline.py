"""The baseline scene: what ``reset`` (and ``hello``) build, and the scene
and view layer tools act on.

Identical on every run and on Blender 3.4 and 4.5. Factory settings with an
empty scene (``wm.read_factory_settings(use_empty=True)``), every tracked
datablock removed, then built with ``bpy.data``:

- scene "Scene" (the only scene), view layer "ViewLayer", frame 1 (range 1-250), 24 fps;
- object "Camera" (camera data "Camera": perspective, lens 50 mm, sensor 36 mm,
  sensor fit AUTO, clip 0.1-100 m) at location (7.3589, -6.9258, 4.9583),
  rotation_euler XYZ (1.1093, 0.0, 0.8149), scale 1; ``scene.camera = Camera``;
- object "Light" (light data "Light": POINT, 1000 W, white, radius 0.1 m) at
  (4.0762, 1.0055, 5.9039), rotation 0, scale 1;
- both objects linked to the scene's master collection; no other collection;
  no active object;
- world "World": no nodes, color (0.05, 0.05, 0.05);
- render: engine CYCLES, device CPU, 640x480 at 100 %, PNG RGBA 8 bit, every
  stamp/metadata field off (render.still also strips PNG text/time chunks), no film transparency, compositing and sequencer off,
  color management Standard view / no look / exposure 0 / gamma 1;
- Cycles: 16 samples, seed 0, animated seed off, adaptive sampling off,
  denoising off (render determinism).
"""

import bpy

from common import is_tomb
from compat import has_cycles, set_world_use_nodes, stamp_flags
from index import INDEX
from layers import forget_actives
from state import BRIDGE, STATE
from trash import forget_trash

TRACKED_COLLECTIONS = ("objects", "meshes", "cameras", "lights", "materials", "worlds", "collections", "curves",
                       "actions")


def reset_scene():
    INDEX.invalidate()
    forget_trash()
    forget_actives()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    # Factory settings may bring the preference back: no .blend file may run
    # its scripts or Python drivers (checkpoints load with use_scripts=False
    # too). Setting it also clears Blender's global auto-exec flag.
    bpy.context.preferences.filepaths.use_scripts_auto_execute = False
    BRIDGE["tomb_counter"] = 0
    for coll in TRACKED_COLLECTIONS:
        data = getattr(bpy.data, coll)
        for db in list(data):
            data.remove(db)
    scenes = list(bpy.data.scenes)
    sc = scenes[0]
    for other in scenes[1:]:
        bpy.data.scenes.remove(other)
    sc.name = "Scene"
    if len(sc.view_layers):
        sc.view_layers[0].name = "ViewLayer"

    cam = bpy.data.cameras.new("Camera")
    cam.type = "PERSP"
    cam.lens_unit = "MILLIMETERS"
    cam.lens = 50.0
    cam.sensor_width = 36.0
    cam.sensor_fit = "AUTO"
    cam.clip_start = 0.1
    cam.clip_end = 100.0
    cam.shift_x = 0.0
    cam.shift_y = 0.0
    cam_ob = bpy.data.objects.new("Camera", cam)
    cam_ob.location = (7.3589, -6.9258, 4.9583)
    cam_ob.rotation_mode = "XYZ"
    cam_ob.rotation_euler = (1.1093, 0.0, 0.8149)
    sc.collection.objects.link(cam_ob)

    light = bpy.data.lights.new("Light", "POINT")
    light.energy = 1000.0
    light.color = (1.0, 1.0, 1.0)
    light.shadow_soft_size = 0.1
    light_ob = bpy.data.objects.new("Light", light)
    light_ob.location = (4.0762, 1.0055, 5.9039)
    sc.collection.objects.link(light_ob)

    world = bpy.data.worlds.new("World")
    set_world_use_nodes(world, False)
    world.color = (0.05, 0.05, 0.05)
    sc.world = world
    sc.camera = cam_ob
    if len(sc.view_layers):
        sc.view_layers[0].objects.active = None

    sc.frame_start = 1
    sc.frame_end = 250
    sc.frame_set(1)
    r = sc.render
    r.fps = 24
    r.fps_base = 1.0
    if has_cycles():
        r.engine = "CYCLES"
    r.resolution_x = 640
    r.resolution_y = 480
    r.resolution_percentage = 100
    r.film_transparent = False
    r.use_compositing = False
    r.use_sequencer = False
    r.filepath = ""
    r.image_settings.file_format = "PNG"
    r.image_settings.color_mode = "RGBA"
    r.image_settings.color_depth = "8"
    r.image_settings.compression = 15
    for f in stamp_flags(r):
        setattr(r, f, False)
    sc.display_settings.display_device = "sRGB"
    sc.view_settings.view_transform = "Standard"
    sc.view_settings.look = "None"
    sc.view_settings.exposure = 0.0
    sc.view_settings.gamma = 1.0
    if has_cycles():
        cy = sc.cycles
        cy.device = "CPU"
        cy.samples = 16
        cy.seed = 0
        cy.use_animated_seed = False
        cy.use_adaptive_sampling = False
        cy.use_denoising = False
    if hasattr(sc, "eevee"):
        sc.eevee.taa_render_samples = 64
    STATE.rebuild()
    return STATE.scene_hash()


def live_scene(name):
    """The scene named name, None when there is none or the name is the
    bridge's own (window.PARKED): no tool or record may reach that one."""
    return None if is_tomb(name) else bpy.data.scenes.get(name)


def live_scenes():
    """Every scene but the bridge's own (window.PARKED), which holds nothing
    and no tool or record reaches."""
    return [sc for sc in bpy.data.scenes if not is_tomb(sc.name)]


def current_scene():
    return bpy.data.scenes.get("Scene") or next(s for s in bpy.data.scenes if not is_tomb(s.name))


def active_view_layer(sc):
    return sc.view_layers[0] if len(sc.view_layers) else None
