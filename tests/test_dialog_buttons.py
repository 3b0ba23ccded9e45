"""The dialogs' one OK/Cancel button box (studio.common.ok_cancel_buttons):
OK named for what it does and checked by the dialog before it accepts,
Cancel rejects; the model manager's dialogs use it."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLineEdit

from studio.common import ok_cancel_buttons
from studio.model_manager.dialogs import DeployOllamaDialog, ExportGgufDialog

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


def test_the_export_dialogs_name_their_ok_and_check_before_accepting(qtbot) -> None:
    export = ExportGgufDialog({"name": "m", "kind": "hf"})
    qtbot.addWidget(export)
    ok = export.findChild(QDialogButtonBox).button(OK)
    assert ok.text() == "Export"
    export.out.setText("model.bin")
    ok.click()  # refused: the file name must end in .gguf
    assert export.result() == 0 and "end in .gguf" in export.message.text()
    export.out.setText("model.gguf")
    with qtbot.waitSignal(export.accepted):
        ok.click()

    for one_click, text in ((True, "Export and deploy"), (False, "Deploy")):
        deploy = DeployOllamaDialog({"name": "m", "kind": "gguf"}, one_click=one_click)
        qtbot.addWidget(deploy)
        box = deploy.findChild(QDialogButtonBox)
        assert box.button(OK).text() == text
        deploy.findChild(QLineEdit).setText("bad name!")
        box.button(OK).click()
        assert deploy.result() == 0 and "letters, digits" in deploy.message.text()
        with qtbot.waitSignal(deploy.rejected):
            box.button(CANCEL).click()
