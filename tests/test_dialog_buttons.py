"""The dialogs' one OK/Cancel button box (studio.common.ok_cancel_buttons):
OK named for what it does and checked by the dialog before it accepts,
Cancel rejects; every dialog uses it (the run forms: tests/test_run_form.py)."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox

from studio.common import ok_cancel_buttons

OK = QDialogButtonBox.StandardButton.Ok
CANCEL = QDialogButtonBox.StandardButton.Cancel


def test_ok_runs_the_check_and_cancel_rejects(qtbot) -> None:
    dialog = QDialog()
    qtbot.addWidget(dialog)
    checked: list[bool] = []
    buttons = ok_cancel_buttons(dialog, "Export", lambda: checked.append(True))
    assert buttons.button(OK).text() == "Export"
    buttons.button(OK).click()
    assert checked == [True] and dialog.result() == 0  # the check did not accept
    with qtbot.waitSignal(dialog.rejected):
        buttons.button(CANCEL).click()

    plain = QDialog()
    qtbot.addWidget(plain)
    plain_buttons = ok_cancel_buttons(plain)
    assert plain_buttons.button(OK).text() == QDialogButtonBox().addButton(OK).text()
    with qtbot.waitSignal(plain.accepted):
        plain_buttons.button(OK).click()
