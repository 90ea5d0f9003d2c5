//! A stand-in shim for the scripted chat: answers the file operations from
//! an in-memory tree under [`ROOT`], `echo hello` and PING.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use tungstenite::Message;

use super::{Client, frame, send};

/// The session root the stand-in advertises.
pub const ROOT: &str = "/srv/root";

/// Answers requests from an in-memory tree until the connection closes.
/// `corrupt_reads` makes FILE_READ return the wrong content. Returns every
/// request seen.
pub fn fake_shim(mut ws: Client, corrupt_reads: bool) -> Vec<Value> {
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    let mut dirs: BTreeSet<String> = BTreeSet::from([ROOT.to_owned()]);
    let mut seen = Vec::new();
    loop {
        let request = match ws.read() {
            Ok(Message::Text(text)) => serde_json::from_str::<Value>(text.as_str()).unwrap(),
            Ok(_) => continue,
            Err(_) => return seen,
        };
        seen.push(request.clone());
        let id = request["id"].as_str().unwrap().to_owned();
        let p = &request["payload"];
        let path = p["path"].as_str().unwrap_or_default().to_owned();
        let parent = |path: &str| {
            path.rsplit_once('/')
                .map(|(dir, _)| dir.to_owned())
                .unwrap_or_default()
        };
        let ack = json!({"ok": true});
        let (message_type, payload) = match request["type"].as_str().unwrap() {
            "FILE_STAT" => {
                let payload = if dirs.contains(&path) {
                    json!({"exists": true, "is_file": false, "is_dir": true, "size_bytes": 4096, "mode": "0755"})
                } else if let Some(content) = files.get(&path) {
                    json!({"exists": true, "is_file": true, "is_dir": false, "size_bytes": content.len(), "mode": "0644"})
                } else {
                    json!({"exists": false})
                };
                ("FILE_STAT_RESPONSE", payload)
            }
            "FILE_WRITE" => {
                assert_eq!(p["create_parents"], true);
                dirs.insert(parent(&path));
                files.insert(path, p["content"].as_str().unwrap().to_owned());
                ("ACK", ack)
            }
            "FILE_READ" => {
                let mut content = files[&path].clone();
                if corrupt_reads {
                    content.push('!');
                }
                let size = content.len();
                (
                    "FILE_CONTENTS",
                    json!({"content": content, "encoding": "utf-8", "size_bytes": size, "truncated": false}),
                )
            }
            "FILE_LIST" => {
                let entries: Vec<Value> = files
                    .iter()
                    .filter(|(file, _)| parent(file) == path)
                    .map(|(file, content)| {
                        json!({"name": file.rsplit('/').next(), "path": file, "is_file": true, "is_dir": false,
                               "is_symlink": false, "size_bytes": content.len(), "mtime": 1.5})
                    })
                    .collect();
                (
                    "FILE_LIST_RESPONSE",
                    json!({"entries": entries, "truncated": false}),
                )
            }
            "FILE_MOVE" => {
                let content = files.remove(p["src"].as_str().unwrap()).unwrap();
                files.insert(p["dst"].as_str().unwrap().to_owned(), content);
                ("ACK", ack)
            }
            "FILE_DELETE" => {
                if p["recursive"] == true {
                    files.retain(|file, _| !file.starts_with(&format!("{path}/")));
                } else {
                    assert!(
                        files.keys().all(|file| parent(file) != path),
                        "deleting a non-empty directory"
                    );
                }
                files.remove(&path);
                dirs.remove(&path);
                ("ACK", ack)
            }
            "EXECUTE_COMMAND" => {
                assert_eq!(p["command"], "echo hello");
                (
                    "COMMAND_RESULT",
                    json!({"stdout": "hello\n", "stderr": "", "exit_code": 0, "timed_out": false,
                                          "duration_seconds": 0.004, "output_truncated": false}),
                )
            }
            "PING" => {
                send(&mut ws, &frame("PONG", &id, Value::Null, json!({})));
                continue;
            }
            other => panic!("unexpected request {other}"),
        };
        send(&mut ws, &frame(message_type, &id, json!(4), payload));
    }
}
