//! The cluster's certificates, made with the openssl command (xtask stays std-only): one CA,
//! the API server's serving certificate, a client certificate per component, the
//! service-account signing key, and a kubeconfig per identity. EC P-256 keys: quick to make,
//! and accepted everywhere Kubernetes takes a key.

use std::path::Path;
use std::process::Command;

use super::{KUBERNETES_SERVICE_IP, Layout, NODE_IP, NODE_NAME, configs};
use crate::run::display;
use crate::{Error, Result};

/// Short-lived: the cluster lives for a test run.
const DAYS: &str = "7";

/// Client identities: file name, subject.
const CLIENTS: [(&str, &str); 6] = [
    ("admin", "/O=system:masters/CN=poolkeeper-cluster-admin"),
    ("kubelet", "/O=system:nodes/CN=system:node:NODE"),
    (
        "kube-controller-manager",
        "/CN=system:kube-controller-manager",
    ),
    ("kube-scheduler", "/CN=system:kube-scheduler"),
    ("kube-proxy", "/CN=system:kube-proxy"),
    // The API server's identity towards kubelets (logs, exec).
    (
        "apiserver-kubelet-client",
        "/O=system:masters/CN=kube-apiserver-kubelet-client",
    ),
];

/// Components that get a kubeconfig of their own (the admin's is the user's).
pub const KUBECONFIGS: [&str; 4] = [
    "kubelet",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
];

pub fn create(layout: &Layout) -> Result<()> {
    let dir = layout.pki();
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            DAYS,
            "-subj",
            "/CN=poolkeeper-cluster-ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ],
    )?;
    let server_names = format!(
        "subjectAltName=IP:{NODE_IP},IP:{KUBERNETES_SERVICE_IP},IP:127.0.0.1,DNS:kubernetes,\
         DNS:kubernetes.default,DNS:kubernetes.default.svc,\
         DNS:kubernetes.default.svc.cluster.local,DNS:localhost\n\
         extendedKeyUsage=serverAuth\n"
    );
    signed(&dir, "apiserver", "/CN=kube-apiserver", &server_names)?;
    for (name, subject) in CLIENTS {
        let subject = subject.replace("NODE", NODE_NAME);
        signed(&dir, name, &subject, "extendedKeyUsage=clientAuth\n")?;
    }
    openssl(
        &dir,
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-out",
            "service-account.key",
        ],
    )?;
    openssl(
        &dir,
        &[
            "pkey",
            "-in",
            "service-account.key",
            "-pubout",
            "-out",
            "service-account.pub",
        ],
    )?;
    write_kubeconfigs(layout)
}

/// A key and a certificate signed by the CA, with the given extensions.
fn signed(dir: &Path, name: &str, subject: &str, extensions: &str) -> Result<()> {
    let ext = dir.join(format!("{name}.ext"));
    std::fs::write(&ext, extensions)
        .map_err(|e| Error::io(format!("writing {}", ext.display()), e))?;
    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            subject,
            "-keyout",
            &key,
            "-out",
            &csr,
        ],
    )?;
    let ext_name = format!("{name}.ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            DAYS,
            "-extfile",
            &ext_name,
            "-out",
            &crt,
        ],
    )?;
    for leftover in [csr, ext_name] {
        let _ = std::fs::remove_file(dir.join(leftover));
    }
    Ok(())
}

fn write_kubeconfigs(layout: &Layout) -> Result<()> {
    let pki = layout.pki();
    let server = layout.server();
    let ca = pki.join("ca.crt");
    let identities = KUBECONFIGS
        .iter()
        .map(|name| (*name, layout.component_kubeconfig(name)))
        .chain([("admin", layout.kubeconfig())]);
    for (name, path) in identities {
        let text = configs::kubeconfig(
            &server,
            &ca.to_string_lossy(),
            &pki.join(format!("{name}.crt")).to_string_lossy(),
            &pki.join(format!("{name}.key")).to_string_lossy(),
        );
        std::fs::write(&path, text)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    }
    Ok(())
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let mut command = Command::new("openssl");
    command.current_dir(dir).args(args);
    let shown = display(&command);
    let out = command
        .output()
        .map_err(|e| Error::io(format!("starting `{shown}` (the openssl package)"), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Check(format!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
