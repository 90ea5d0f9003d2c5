"""A test window for the computer-use tests: one top-level window of a given
title, WM_CLASS, background colour and geometry that writes every input
event it receives to a file as JSON lines.

Run as `/usr/bin/python3 client.py '<json>'` with the keys `events` (file to
append to), `title`, `instance` and `class` (the two parts of WM_CLASS; Tk
requires the instance to start with a lower-case letter), `colour`
("#rrggbb") and `geometry` ([x, y, width, height]).

Lines written, one JSON object each, flushed at once:

* {"event": "mapped", "pid": N} when the window is mapped;
* {"event": "press"|"release", "button": B, "x": X, "y": Y, "state": S}
  with root coordinates and the X button number (1-7);
* {"event": "motion", "x": X, "y": Y} with root coordinates;
* {"event": "key", "char": C, "keysym": K, "state": S}: C is the text the
  key event produces as Tk resolves it (%A), K its keysym name (%K);
* {"event": "paste", "text": T} on Control-v: T is the CLIPBOARD's text as
  Tk fetches it from the selection owner ("" when there is none), as an
  editor pastes.

Tk 8.6 on X11 reports the horizontal wheel buttons 6 and 7 as buttons 4 and
5 with Shift added to the state. A real button 4 or 5 carries its own button
mask in the state of its release, a converted one does not, so wheel events
are written when their release arrives, with the X button number restored
(a Shift really held during a horizontal wheel event is not reported).
"""

import json
import os
import sys
import tkinter as tk

args = json.loads(sys.argv[1])
out = open(args["events"], "a", buffering=1, encoding="utf-8")


def emit(**fields):
    out.write(json.dumps(fields, ensure_ascii=False) + "\n")
    out.flush()


root = tk.Tk()
# The application's own main window stays unmapped: WM_CLASS is only fully
# settable on a toplevel created with an explicit class and name.
root.withdraw()
top = tk.Toplevel(
    root, class_=args["class"], name=args["instance"], background=args["colour"]
)
top.title(args["title"])
x, y, width, height = args["geometry"]
top.geometry(f"{width}x{height}+{x}+{y}")

SHIFT = 1
BUTTON_MASK = {4: 1 << 11, 5: 1 << 12}
# Wheel presses waiting for their release (see the module comment).
pending_wheel = {}


def key(event):
    emit(event="key", char=event.char, keysym=event.keysym, state=event.state)


def press(event):
    if event.num in BUTTON_MASK:
        pending_wheel[event.num] = event
        return
    emit(event="press", button=event.num, x=event.x_root, y=event.y_root, state=event.state)


def release(event):
    button, state = event.num, event.state
    if button in BUTTON_MASK:
        pressed = pending_wheel.pop(button, event)
        press_state = pressed.state
        if not state & BUTTON_MASK[button]:
            # Converted from 6 or 7: the Shift is Tk's, not the user's.
            button += 2
            state &= ~SHIFT
            press_state &= ~SHIFT
        emit(event="press", button=button, x=pressed.x_root, y=pressed.y_root, state=press_state)
    emit(event="release", button=button, x=event.x_root, y=event.y_root, state=state)


def paste(event):
    # Only the most specific binding of a tag runs, so this one also
    # records the key itself.
    key(event)
    try:
        text = top.clipboard_get()
    except tk.TclError:
        text = ""
    emit(event="paste", text=text)


def motion(event):
    emit(event="motion", x=event.x_root, y=event.y_root)


def mapped(event):
    if event.widget is top:
        emit(event="mapped", pid=os.getpid())


top.bind("<KeyPress>", key)
top.bind("<ButtonPress>", press)
top.bind("<ButtonRelease>", release)
top.bind("<Motion>", motion)
top.bind("<Control-v>", paste)
top.bind("<Map>", mapped)
top.protocol("WM_DELETE_WINDOW", lambda: sys.exit(0))
root.mainloop()
